//! The one decoder from a record to a planner input, used by the planner,
//! its catch-up, replay, explain and the status page.

use unicron_core::planner::InputEvent;
use unicron_core::{ClusterEvent, CommandResult, FailureEvent};

use crate::codec::{AvroCodec, DecodeError};
use crate::topic::{Topic, Topics};

/// Decodes records of the planner's input topics.
#[derive(Debug, Clone)]
pub struct PlannerInputs {
    topics: Topics,
    failure: AvroCodec<FailureEvent>,
    cluster: AvroCodec<ClusterEvent>,
    result: AvroCodec<CommandResult>,
}

impl PlannerInputs {
    pub fn new(topics: Topics) -> PlannerInputs {
        PlannerInputs {
            topics,
            failure: AvroCodec::default(),
            cluster: AvroCodec::default(),
            result: AvroCodec::default(),
        }
    }

    /// The planner's input topics, in the order they are subscribed.
    pub const TOPICS: [Topic; 3] = [Topic::Failures, Topic::Cluster, Topic::CommandResults];

    /// A planner input by its topic (full name): a failure, a cluster
    /// event or a command result; `None` for any other topic.
    pub fn decode(&self, topic: &str, payload: &[u8]) -> Option<Result<InputEvent, DecodeError>> {
        Some(match self.topics.topic_of(topic)? {
            Topic::Failures => self.failure.decode(payload).map(InputEvent::Failure),
            Topic::Cluster => self.cluster.decode(payload).map(InputEvent::Cluster),
            Topic::CommandResults => self.result.decode(payload).map(InputEvent::Result),
            _ => return None,
        })
    }
}
