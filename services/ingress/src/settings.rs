use serde::{Deserialize, Serialize};
use unicron_core::ingress_budget::BudgetConfig;

use crate::error::IngressError;

/// The `[ingress]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngressSettings {
    /// Consumer group shared by ingress instances.
    pub group_id: String,
    /// How often the consumer looks for clusters' topics created since
    /// (librdkafka's `topic.metadata.refresh.interval.ms`): a new
    /// cluster's records are passed on within about this long of its
    /// first writer starting.
    pub new_topic_check_s: f64,
    /// What each cluster may send (per ingress instance): records beyond
    /// it are dropped and counted, so one cluster's flood cannot delay
    /// the others' records on the shared topics.
    pub budget: BudgetConfig,
}

impl Default for IngressSettings {
    fn default() -> Self {
        IngressSettings {
            group_id: "unicron-ingress".into(),
            new_topic_check_s: 2.0,
            budget: BudgetConfig::default(),
        }
    }
}

impl IngressSettings {
    /// The first setting at fault, named.
    pub fn validate(&self) -> Result<(), IngressError> {
        if self.group_id.is_empty() {
            return Err(IngressError::Config(
                "ingress.group_id: must not be empty".into(),
            ));
        }
        if !(self.new_topic_check_s.is_finite() && self.new_topic_check_s >= 0.1) {
            return Err(IngressError::Config(format!(
                "ingress.new_topic_check_s: {} is not a number of seconds of 0.1 or more",
                self.new_topic_check_s
            )));
        }
        self.budget
            .validate()
            .map_err(|why| IngressError::Config(format!("ingress.budget.{why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_named() {
        assert!(IngressSettings::default().validate().is_ok());
        let error = IngressSettings {
            new_topic_check_s: 0.0,
            ..IngressSettings::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            error.to_string().starts_with("ingress.new_topic_check_s:"),
            "{error}"
        );
    }
}
