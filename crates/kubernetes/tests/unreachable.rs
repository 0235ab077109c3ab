//! While the API server is away, kube-watch publishes nothing (the
//! cluster's state is unknown, never healthy) and keeps trying; a
//! kubeconfig that cannot be read is one line naming the file.

use std::time::Duration;

use unicron_bus::testing::{GroupProgress, embedded_with_topics};
use unicron_codec::{Topic, Topics};
use unicron_kubernetes::testing::unreachable_api;
use unicron_kubernetes::{WatchSettings, run_watcher};

#[tokio::test]
async fn kube_watch_publishes_nothing_while_the_api_server_is_away() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, kafka) = embedded_with_topics();
    let brokers = broker.bootstrap_servers().to_string();
    let api = unreachable_api(dir.path());
    let settings = WatchSettings {
        cluster: "k".into(),
        kubeconfig: api.kubeconfig,
        timeout_s: api.timeout_s,
        ..WatchSettings::default()
    };
    // Long enough for the first listing to fail and be tried again.
    let stop = tokio::time::sleep(Duration::from_secs(5));
    run_watcher(&settings, &kafka, &brokers, stop)
        .await
        .expect("an unreachable API server is waited out, not an error");
    let topics = Topics::new(&kafka);
    let progress = GroupProgress::new(&kafka, &brokers, "nobody");
    for topic in [Topic::Cluster, Topic::Logs] {
        assert_eq!(progress.written(topics.name(topic)), 0, "{topic:?}");
    }
}

#[tokio::test]
async fn a_kubeconfig_that_cannot_be_read_names_the_file() {
    let (broker, kafka) = embedded_with_topics();
    let settings = WatchSettings {
        cluster: "k".into(),
        kubeconfig: Some("/nonexistent/kubeconfig".into()),
        ..WatchSettings::default()
    };
    let error = run_watcher(&settings, &kafka, broker.bootstrap_servers(), async {})
        .await
        .expect_err("no kubeconfig");
    assert!(
        error.to_string().contains("/nonexistent/kubeconfig"),
        "{error}"
    );
}
