//! A topic: its partitions' logs under one log directory, in Kafka's layout
//! `<log_dir>/<topic>-<partition>/`, all with the topic's config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::compaction::CompactionReport;
use super::config::LogConfig;
use super::file_io::IoContext;
use super::partition::Partition;
use super::recovery::OpenReport;
use super::retention::RetentionReport;
use crate::error::{Error, Result};

/// Kafka's limit on topic name length.
const MAX_TOPIC_NAME_LEN: usize = 249;

/// The directory of one partition: `<log_dir>/<topic>-<partition>`.
pub fn partition_dir(log_dir: impl AsRef<Path>, topic: &str, partition: i32) -> PathBuf {
    log_dir.as_ref().join(format!("{topic}-{partition}"))
}

/// The partitions of a topic, opened when the topic is opened (those on disk) or on first use.
pub struct Topic {
    log_dir: PathBuf,
    name: String,
    config: LogConfig,
    partitions: BTreeMap<i32, Partition>,
}

impl Topic {
    /// Opens every partition of `name` found in `log_dir` (creating `log_dir` if needed), with
    /// each one's open report.
    pub fn open(
        log_dir: impl AsRef<Path>,
        name: &str,
        config: LogConfig,
    ) -> Result<(Self, Vec<(i32, OpenReport)>)> {
        check_topic_name(name)?;
        config.validate()?;
        let log_dir = log_dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&log_dir).context(|| format!("creating {}", log_dir.display()))?;
        let mut topic = Self {
            log_dir,
            name: name.to_string(),
            config,
            partitions: BTreeMap::new(),
        };
        let mut reports = Vec::new();
        for partition in topic.partitions_on_disk()? {
            let (_, report) = topic.open_partition(partition)?;
            reports.push((partition, report));
        }
        Ok((topic, reports))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// The open partitions' numbers, ascending.
    pub fn partition_ids(&self) -> Vec<i32> {
        self.partitions.keys().copied().collect()
    }

    /// The partition, created if it does not exist yet.
    pub fn partition(&mut self, partition: i32) -> Result<&mut Partition> {
        if self.partitions.contains_key(&partition) {
            return self
                .partitions
                .get_mut(&partition)
                .ok_or_else(|| Error::InvalidState(format!("partition {partition} vanished")));
        }
        Ok(self.open_partition(partition)?.0)
    }

    /// Fsyncs every partition's active segment.
    pub fn flush(&mut self) -> Result<()> {
        self.partitions.values_mut().try_for_each(Partition::flush)
    }

    /// [`Partition::delete_expired`] on every partition.
    pub fn delete_expired(&mut self, now_ms: i64) -> Result<Vec<(i32, RetentionReport)>> {
        self.partitions
            .iter_mut()
            .map(|(&id, partition)| Ok((id, partition.delete_expired(now_ms)?)))
            .collect()
    }

    /// [`Partition::compact`] on every partition.
    pub fn compact(&mut self, now_ms: i64) -> Result<Vec<(i32, CompactionReport)>> {
        self.partitions
            .iter_mut()
            .map(|(&id, partition)| Ok((id, partition.compact(now_ms)?)))
            .collect()
    }

    fn open_partition(&mut self, partition: i32) -> Result<(&mut Partition, OpenReport)> {
        if partition < 0 {
            return Err(Error::InvalidArgument(format!(
                "partition {partition} is negative"
            )));
        }
        let dir = partition_dir(&self.log_dir, &self.name, partition);
        let (opened, report) = Partition::open(dir, self.config.clone())?;
        Ok((self.partitions.entry(partition).or_insert(opened), report))
    }

    /// Partition numbers with a `<topic>-<n>` directory.
    fn partitions_on_disk(&self) -> Result<Vec<i32>> {
        let prefix = format!("{}-", self.name);
        let listing = std::fs::read_dir(&self.log_dir)
            .context(|| format!("listing {}", self.log_dir.display()))?;
        let mut found = Vec::new();
        for item in listing {
            let item = item.context(|| format!("listing {}", self.log_dir.display()))?;
            let name = item.file_name();
            let number = name
                .to_str()
                .and_then(|name| name.strip_prefix(&prefix))
                .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse::<i32>().ok());
            if let Some(number) = number.filter(|_| item.path().is_dir()) {
                found.push(number);
            }
        }
        found.sort_unstable();
        Ok(found)
    }
}

/// Kafka's topic name rule: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
fn check_topic_name(name: &str) -> Result<()> {
    let legal = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty() || name.len() > MAX_TOPIC_NAME_LEN || !legal || name == "." || name == ".." {
        return Err(Error::InvalidArgument(format!(
            "topic name {name:?} is not 1 to {MAX_TOPIC_NAME_LEN} of [a-zA-Z0-9._-] (and not . \
             or ..)"
        )));
    }
    Ok(())
}
