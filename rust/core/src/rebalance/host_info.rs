//! The two value types of AssignmentInfo's maps: `TopicPartition` and `HostInfo` (the
//! `application.server` endpoint of an instance, for interactive queries).

use std::fmt;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: &str, partition: i32) -> Self {
        TopicPartition {
            topic: topic.to_string(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostInfo {
    pub host: String,
    pub port: i32,
}

impl HostInfo {
    pub fn new(host: &str, port: i32) -> Self {
        HostInfo {
            host: host.to_string(),
            port,
        }
    }

    /// Parses `application.server`'s `host:port` (the port after the last colon, as Kafka's
    /// `parseHostInfo` does).
    pub fn parse(endpoint: &str) -> Result<Self> {
        let invalid = || {
            Error::InvalidArgument(format!(
                "endpoint {endpoint:?} is not of the form host:port"
            ))
        };
        let (host, port) = endpoint.rsplit_once(':').ok_or_else(invalid)?;
        let port: i32 = port.parse().map_err(|_| invalid())?;
        if host.is_empty() || !(0..=65535).contains(&port) {
            return Err(invalid());
        }
        Ok(HostInfo::new(host, port))
    }
}

impl fmt::Display for HostInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}
