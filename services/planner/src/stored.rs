//! Where the planner keeps each cluster in its store: the state key, and
//! an index of the clusters of each input partition (what a checkpoint or
//! a takeover of that partition covers).

use unicron_core::planner::{ClusterState, Planner};
use unicron_store::Store;

use crate::error::PlannerError;

/// The store key of a cluster's state.
pub(crate) fn state_key(cluster: &str) -> Vec<u8> {
    format!("cluster/{cluster}").into_bytes()
}

/// Loads `cluster`'s stored state into `planner` unless it has it already.
pub(crate) fn load_cluster(
    planner: &mut Planner,
    stored: impl FnOnce(&[u8]) -> Result<Option<Vec<u8>>, unicron_store::StoreError>,
    cluster: &str,
) -> Result<(), PlannerError> {
    if cluster.is_empty() || planner.cluster(cluster).is_some() {
        return Ok(());
    }
    if let Some(bytes) = stored(&state_key(cluster))? {
        let state: ClusterState =
            serde_json::from_slice(&bytes).map_err(|e| PlannerError::CorruptState {
                cluster: cluster.to_string(),
                reason: e.to_string(),
            })?;
        planner
            .restore(state)
            .map_err(|reason| PlannerError::CorruptState {
                cluster: cluster.to_string(),
                reason,
            })?;
    }
    Ok(())
}

/// The store key listing `cluster` under input `partition`.
pub(crate) fn index_key(partition: i32, cluster: &str) -> Vec<u8> {
    format!("partition/{partition}/{cluster}").into_bytes()
}

/// The clusters stored under input `partition`, in order.
pub(crate) fn clusters_of(store: &Store, partition: i32) -> Result<Vec<String>, PlannerError> {
    let prefix = format!("partition/{partition}/");
    Ok(store
        .state_with_prefix(prefix.as_bytes())?
        .into_iter()
        .filter_map(|(key, _)| String::from_utf8(key[prefix.len()..].to_vec()).ok())
        .collect())
}
