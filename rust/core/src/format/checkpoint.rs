//! Kafka Streams' `.checkpoint` file (`OffsetCheckpoint`, spec 1.9): per task directory, the last
//! changelog offset each store holds, as text. Since KIP-1035 the `offsets` column family is the
//! truth and this file is kept for tools and downgrades, written after each commit.
//!
//! ```text
//! 0                           format version
//! 2                           number of entries
//! app-counts-changelog 1 1233
//! app-other-changelog 1 -4    -4: offset unknown
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The file name inside a task directory.
pub const CHECKPOINT_FILE_NAME: &str = ".checkpoint";
/// Kafka's `OffsetCheckpoint.OFFSET_UNKNOWN`: a store whose offset is not known.
pub const OFFSET_UNKNOWN: i64 = -4;
const VERSION: &str = "0";

/// `(topic, partition)` -> last offset contained in the store.
pub type Offsets = BTreeMap<(String, i32), i64>;

fn is_valid(offset: i64) -> bool {
    offset >= 0 || offset == OFFSET_UNKNOWN
}

pub struct OffsetCheckpoint {
    path: PathBuf,
}

impl OffsetCheckpoint {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The checkpoint of a task directory.
    pub fn in_task_dir(task_dir: &Path) -> Self {
        Self::new(task_dir.join(CHECKPOINT_FILE_NAME))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entries; none when the file does not exist. Invalid offsets are skipped, as Kafka
    /// skips them; a wrong version, count or line is an error.
    pub fn read(&self) -> Result<Offsets> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Offsets::new()),
            Err(e) => return Err(e.into()),
        };
        let corrupt =
            |what: &str| Error::Corrupted(format!("checkpoint {}: {what}", self.path.display()));
        let mut lines = text.lines();
        match lines.next() {
            Some(VERSION) => {}
            Some(other) => return Err(corrupt(&format!("unknown version {other:?}"))),
            None => return Err(corrupt("empty file")),
        }
        let expected: usize = lines
            .next()
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| corrupt("missing entry count"))?;
        let mut offsets = Offsets::new();
        let mut skipped = 0;
        for line in lines.filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [topic, partition, offset] = fields[..] else {
                return Err(corrupt(&format!("malformed line {line:?}")));
            };
            let (Ok(partition), Ok(offset)) = (partition.parse::<i32>(), offset.parse::<i64>())
            else {
                return Err(corrupt(&format!("malformed line {line:?}")));
            };
            if is_valid(offset) {
                offsets.insert((topic.to_string(), partition), offset);
            } else {
                skipped += 1;
            }
        }
        if offsets.len() + skipped != expected {
            return Err(corrupt(&format!(
                "expected {expected} entries, found {}",
                offsets.len() + skipped
            )));
        }
        Ok(offsets)
    }

    /// Replaces the file atomically (temporary file, fsync, rename); no entries deletes it.
    pub fn write(&self, offsets: &Offsets) -> Result<()> {
        if let Some((tp, offset)) = offsets.iter().find(|(_, &o)| !is_valid(o)) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint offset {offset} for {}-{} is neither >= 0 nor {OFFSET_UNKNOWN}",
                tp.0, tp.1
            )));
        }
        if offsets.is_empty() {
            return match fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            };
        }
        let mut text = format!("{VERSION}\n{}\n", offsets.len());
        for ((topic, partition), offset) in offsets {
            text.push_str(&format!("{topic} {partition} {offset}\n"));
        }
        let tmp = self.path.with_extension("tmp");
        let mut file = fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        Ok(())
    }

    /// Sets the entries of `updates` and keeps the others (several stores share one file).
    pub fn update(&self, updates: &Offsets) -> Result<()> {
        let mut offsets = self.read()?;
        offsets.extend(updates.iter().map(|(tp, &o)| (tp.clone(), o)));
        self.write(&offsets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> (String, i32) {
        (topic.to_string(), partition)
    }

    #[test]
    fn spec_6_2_example_reads_and_writes_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE_NAME);
        let text = "0\n2\napp-counts-changelog 1 1233\napp-other-changelog 1 -4\n";
        fs::write(&path, text).unwrap();
        let checkpoint = OffsetCheckpoint::new(&path);
        let offsets = checkpoint.read().unwrap();
        assert_eq!(offsets[&tp("app-counts-changelog", 1)], 1233);
        assert_eq!(offsets[&tp("app-other-changelog", 1)], OFFSET_UNKNOWN);
        fs::remove_file(&path).unwrap();
        checkpoint.write(&offsets).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn update_merges_and_empty_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = OffsetCheckpoint::in_task_dir(dir.path());
        assert!(checkpoint.read().unwrap().is_empty());
        checkpoint
            .update(&Offsets::from([(tp("a-changelog", 0), 5)]))
            .unwrap();
        checkpoint
            .update(&Offsets::from([(tp("b-changelog", 0), 7)]))
            .unwrap();
        assert_eq!(checkpoint.read().unwrap().len(), 2);
        checkpoint.write(&Offsets::new()).unwrap();
        assert!(!checkpoint.path().exists());
    }

    #[test]
    fn invalid_offsets_are_refused_on_write_and_skipped_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = OffsetCheckpoint::in_task_dir(dir.path());
        let bad = Offsets::from([(tp("t", 0), -2)]);
        assert!(matches!(
            checkpoint.write(&bad),
            Err(Error::InvalidArgument(_))
        ));
        fs::write(checkpoint.path(), "0\n2\nt 0 -2\nt 1 3\n").unwrap();
        assert_eq!(checkpoint.read().unwrap(), Offsets::from([(tp("t", 1), 3)]));
    }

    #[test]
    fn wrong_version_count_or_line_is_corrupted() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = OffsetCheckpoint::in_task_dir(dir.path());
        for text in ["1\n0\n", "0\n2\nt 0 3\n", "0\n1\nt zero 3\n", "0\nx\n", ""] {
            fs::write(checkpoint.path(), text).unwrap();
            assert!(
                matches!(checkpoint.read(), Err(Error::Corrupted(_))),
                "{text:?}"
            );
        }
    }
}
