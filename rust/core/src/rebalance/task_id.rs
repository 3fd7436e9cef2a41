//! `TaskId`: a subtopology and a partition, optionally inside a named topology (v10+), and its
//! two wire forms: plain `(i32, i32)` in SubscriptionInfo v1-6 / AssignmentInfo v1-9, and
//! `ConsumerProtocolUtils.writeTaskIdTo` in AssignmentInfo v10+ (an i32 char count and the name
//! as UTF-16BE chars; 0 chars = no named topology).

use std::fmt;

use super::wire::{Reader, Writer};
use super::MIN_NAMED_TOPOLOGY_VERSION;
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// Kafka's `subtopology` (formerly `topicGroupId`).
    pub subtopology: i32,
    pub partition: i32,
    /// `None` outside named topologies. Kafka treats an empty name as none, and so do the
    /// encoders here; decoders never return `Some("")`.
    pub named_topology: Option<String>,
}

impl TaskId {
    pub fn new(subtopology: i32, partition: i32) -> Self {
        TaskId {
            subtopology,
            partition,
            named_topology: None,
        }
    }

    pub fn named(subtopology: i32, partition: i32, named_topology: &str) -> Self {
        TaskId {
            subtopology,
            partition,
            named_topology: (!named_topology.is_empty()).then(|| named_topology.to_string()),
        }
    }

    /// The named topology, with an empty name read as none.
    pub fn topology(&self) -> Option<&str> {
        self.named_topology
            .as_deref()
            .filter(|name| !name.is_empty())
    }

    /// Versions before named topologies cannot carry one; Kafka throws there too.
    pub(crate) fn check_fits(&self, version: i32, field: &str) -> Result<()> {
        match self.topology() {
            Some(name) if version < MIN_NAMED_TOPOLOGY_VERSION => {
                Err(Error::InvalidArgument(format!(
                    "{field}: task {self} has named topology {name:?}, which version {version} \
                     cannot carry (named topologies need version {MIN_NAMED_TOPOLOGY_VERSION}+)"
                )))
            }
            _ => Ok(()),
        }
    }

    /// The fixed 8-byte form (no named topology).
    pub(crate) fn write_plain(&self, out: &mut Writer) {
        out.i32(self.subtopology);
        out.i32(self.partition);
    }

    pub(crate) fn read_plain(reader: &mut Reader<'_>, field: &str) -> Result<Self> {
        Ok(TaskId::new(reader.i32(field)?, reader.i32(field)?))
    }

    /// `writeTaskIdTo(taskId, out, version)`; the caller checked [`TaskId::check_fits`].
    pub(crate) fn write_versioned(&self, out: &mut Writer, version: i32) -> Result<()> {
        self.write_plain(out);
        if version >= MIN_NAMED_TOPOLOGY_VERSION {
            let name = self.topology().unwrap_or("");
            out.count(name.encode_utf16().count(), "named topology length")?;
            out.java_chars(name);
        }
        Ok(())
    }

    pub(crate) fn read_versioned(
        reader: &mut Reader<'_>,
        version: i32,
        field: &str,
    ) -> Result<Self> {
        let mut task = Self::read_plain(reader, field)?;
        if version >= MIN_NAMED_TOPOLOGY_VERSION {
            let chars = reader.count(field, 2)?;
            let name = reader.java_chars(chars, field)?;
            task.named_topology = (!name.is_empty()).then_some(name);
        }
        Ok(task)
    }

    /// Bytes a task takes at least on the wire of `version`, for count checks.
    pub(crate) fn min_wire_size(version: i32) -> usize {
        if version >= MIN_NAMED_TOPOLOGY_VERSION {
            12
        } else {
            8
        }
    }
}

/// Kafka's `TaskId.toString`: `<subtopology>_<partition>`, prefixed by `<name>__` when named.
impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.topology() {
            Some(name) => write!(f, "{name}__{}_{}", self.subtopology, self.partition),
            None => write!(f, "{}_{}", self.subtopology, self.partition),
        }
    }
}
