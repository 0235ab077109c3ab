//! What Slurm tells a job step about itself, so `srun unicron agent ...`
//! needs no per-node arguments: the node's name, the cluster, the job's
//! name (its unicron job id) and the nodes of its allocation.

use unicron_slurm::hostlist;

/// A job step's view of its Slurm job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmStep {
    pub job_id: String,
    pub job_name: Option<String>,
    /// `SLURMD_NODENAME`: this node's name in Slurm.
    pub node: Option<String>,
    pub cluster: Option<String>,
    /// The allocation's nodes, from `SLURM_JOB_NODELIST`.
    pub nodes: Vec<String>,
}

impl SlurmStep {
    /// `None` outside Slurm (`SLURM_JOB_ID` unset).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<SlurmStep>, String> {
        let Some(job_id) = var("SLURM_JOB_ID") else {
            return Ok(None);
        };
        let set = |name| var(name).filter(|v| !v.is_empty());
        let nodes = match set("SLURM_JOB_NODELIST") {
            Some(list) => {
                hostlist::expand(&list).map_err(|e| format!("SLURM_JOB_NODELIST: {e}"))?
            }
            None => Vec::new(),
        };
        Ok(Some(SlurmStep {
            job_id,
            job_name: set("SLURM_JOB_NAME"),
            node: set("SLURMD_NODENAME"),
            cluster: set("SLURM_CLUSTER_NAME"),
            nodes,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::SlurmStep;

    #[test]
    fn reads_a_steps_environment() {
        let env = |k: &str| {
            let value = match k {
                "SLURM_JOB_ID" => "12",
                "SLURM_JOB_NAME" => "gpt",
                "SLURMD_NODENAME" => "n2",
                "SLURM_CLUSTER_NAME" => "c1",
                "SLURM_JOB_NODELIST" => "n[1-3]",
                _ => return None,
            };
            Some(value.to_string())
        };
        let step = SlurmStep::from_env(env).unwrap().unwrap();
        assert_eq!(step.nodes, ["n1", "n2", "n3"]);
        assert_eq!(
            (step.node.as_deref(), step.job_name.as_deref()),
            (Some("n2"), Some("gpt"))
        );
        assert_eq!(SlurmStep::from_env(|_| None).unwrap(), None);
        let bad = |k: &str| (k != "SLURM_JOB_NAME").then(|| "n[1-".to_string());
        assert!(
            SlurmStep::from_env(bad)
                .unwrap_err()
                .contains("SLURM_JOB_NODELIST")
        );
    }
}
