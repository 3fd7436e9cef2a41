//! The on-disk partition log (spec 3.6, 3.8, vectors 6.4): append, read, time lookup, rolling,
//! reopening, crash damage, index rebuilds, truncation, retention and compaction, checked
//! against a plain in-memory model and against the files' bytes parsed by hand.

use std::fs;
use std::path::{Path, PathBuf};

use kstate_core::format::packed::{BinaryBuilder, BinaryColumn};
use kstate_core::log::{
    compact_objects, filename_prefix, CleanupPolicy, CompactedObject, LogConfig, NewRecord,
    OffsetIndexEntry, OpenReport, Partition, SegmentObject, TimeIndexEntry, Topic,
    INVALID_TIMESTAMP,
};
use kstate_core::record::{
    decode_records, Compression, Magic, MessageSetBuilder, Record, TimestampType,
};
use kstate_core::Error;

const ALL_COMPRESSIONS: [Compression; 4] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
];
const NOW: i64 = 1_700_000_000_000;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// A record to append, owned: (timestamp, key, value).
type Row = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// A record as the model keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

impl From<Record> for Stored {
    fn from(record: Record) -> Self {
        Self {
            offset: record.offset,
            timestamp: record.timestamp,
            key: record.key,
            value: record.value,
        }
    }
}

/// What the log should hold.
#[derive(Default)]
struct Model {
    records: Vec<Stored>,
    log_end_offset: i64,
}

impl Model {
    /// Appends as the log does; `rows` are (timestamp, key, value).
    fn append(&mut self, rows: &[Row]) {
        for (timestamp, key, value) in rows {
            self.records.push(Stored {
                offset: self.log_end_offset,
                timestamp: *timestamp,
                key: key.clone(),
                value: value.clone(),
            });
            self.log_end_offset += 1;
        }
    }

    fn truncate_to(&mut self, offset: i64) {
        if offset < self.log_end_offset {
            self.records.retain(|record| record.offset < offset);
            self.log_end_offset = offset;
        }
    }

    /// The first record in offset order with a timestamp `>= target`.
    fn offset_for_time(&self, target: i64) -> Option<(i64, i64)> {
        self.records
            .iter()
            .find(|record| record.timestamp >= target)
            .map(|record| (record.timestamp, record.offset))
    }
}

fn append_rows(
    partition: &mut Partition,
    rows: &[Row],
    now_ms: i64,
) -> kstate_core::Result<kstate_core::log::AppendInfo> {
    let records: Vec<NewRecord<'_>> = rows
        .iter()
        .map(|(timestamp, key, value)| NewRecord {
            timestamp: *timestamp,
            key: key.as_deref(),
            value: value.as_deref(),
        })
        .collect();
    partition.append(&records, now_ms)
}

fn row(timestamp: i64, key: &str, value: &str) -> Row {
    (
        timestamp,
        Some(key.as_bytes().to_vec()),
        Some(value.as_bytes().to_vec()),
    )
}

/// Every record of the log, read in fetches of `max_bytes`.
fn read_all(partition: &Partition, max_bytes: usize) -> Vec<Stored> {
    let mut records = Vec::new();
    let mut next = partition.log_start_offset();
    while next < partition.log_end_offset() {
        let batch = partition.read_records(next, max_bytes).unwrap();
        let Some(last) = batch.last() else { break };
        next = last.offset + 1;
        records.extend(batch.into_iter().map(Stored::from));
    }
    records
}

fn open(dir: &Path, config: &LogConfig) -> (Partition, OpenReport) {
    Partition::open(dir, config.clone()).unwrap()
}

/// Checks records, log end offset and time lookups against the model.
fn assert_matches_model(partition: &Partition, model: &Model, rng: &mut Rng) {
    assert_eq!(partition.log_end_offset(), model.log_end_offset);
    assert_eq!(read_all(partition, 1 << 20), model.records);
    assert_eq!(read_all(partition, 1), model.records);
    let timestamps: Vec<i64> = model.records.iter().map(|r| r.timestamp).collect();
    let max = timestamps.iter().copied().max().unwrap_or(0);
    let mut targets = vec![0, max, max + 1];
    targets.extend(
        timestamps
            .iter()
            .copied()
            .filter(|&timestamp| timestamp >= 0 && rng.below(4) == 0),
    );
    targets.extend((0..5).map(|_| rng.below(max as u64 + 2) as i64));
    for target in targets {
        let found = partition
            .offsets_for_times(target)
            .unwrap()
            .map(|found| (found.timestamp, found.offset));
        assert_eq!(found, model.offset_for_time(target), "target {target}");
    }
}

fn segment_file(dir: &Path, base_offset: i64, extension: &str) -> PathBuf {
    dir.join(format!("{}.{extension}", filename_prefix(base_offset)))
}

/// (position, offset) of every entry of a `.log` file, parsed from the spec 3.1 framing.
fn entry_positions(log: &[u8]) -> Vec<(usize, i64)> {
    let mut entries = Vec::new();
    let mut position = 0;
    while position + 12 <= log.len() {
        let offset = i64::from_be_bytes(log[position..position + 8].try_into().unwrap());
        let size = i32::from_be_bytes(log[position + 8..position + 12].try_into().unwrap());
        entries.push((position, offset));
        position += 12 + size as usize;
    }
    entries
}

fn offset_index(bytes: &[u8]) -> Vec<OffsetIndexEntry> {
    bytes
        .chunks_exact(8)
        .map(|chunk| OffsetIndexEntry::from_bytes(chunk.try_into().unwrap()))
        .collect()
}

fn time_index(bytes: &[u8]) -> Vec<TimeIndexEntry> {
    bytes
        .chunks_exact(12)
        .map(|chunk| TimeIndexEntry::from_bytes(chunk.try_into().unwrap()))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for item in fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        if item.file_name() != ".kstate.lock" {
            fs::copy(item.path(), to.join(item.file_name())).unwrap();
        }
    }
}

/// A log of `count` records of 100 bytes each, timestamps `NOW + offset`; closed.
fn build_log(dir: &Path, config: &LogConfig, count: i64) -> Model {
    let (mut partition, _) = open(dir, config);
    let mut model = Model::default();
    for offset in 0..count {
        // 12 + 22 + 6 + 60 bytes (spec 3.1, 3.2).
        let rows = [row(
            NOW + offset,
            &format!("key{offset:03}"),
            &"v".repeat(60),
        )];
        append_rows(&mut partition, &rows, NOW).unwrap();
        model.append(&rows);
    }
    partition.close().unwrap();
    model
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1000,
        index_interval_bytes: 150,
        ..LogConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Spec 6.4 and the file layout

#[test]
fn index_entries_and_file_names_match_spec_6_4() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 5000,
        index_interval_bytes: 4095,
        ..LogConfig::default()
    };
    let (mut partition, _) = open(dir.path(), &config);
    let start = 1_503_648_000_000;
    // An uncompressed v1 entry of key "k" takes 12 + 22 + 1 + value bytes (spec 3.1, 3.2).
    let entry = |offset: i64, size: usize| row(start + offset, "k", &"x".repeat(size - 35));
    for offset in 0..50 {
        append_rows(&mut partition, &[entry(offset, 100)], NOW).unwrap();
    }
    // 50 entries of 100 bytes fill segment.bytes = 5000, so offset 50 starts segment 50.
    for (offset, size) in [(50, 800), (51, 800), (52, 800), (53, 800), (54, 896)] {
        let info = append_rows(&mut partition, &[entry(offset, size)], NOW).unwrap();
        assert_eq!(info.rolled, offset == 50);
    }
    // Offset 55 is at position 4096: the first entry more than 4095 bytes after the start.
    let last = (1_503_648_000_942, Some(b"k".to_vec()), Some(b"v".to_vec()));
    append_rows(&mut partition, &[last], NOW).unwrap();
    partition.flush().unwrap();

    let index = fs::read(segment_file(dir.path(), 50, "index")).unwrap();
    assert_eq!(hex(&index), "0000000500001000");
    let time = fs::read(segment_file(dir.path(), 50, "timeindex")).unwrap();
    assert_eq!(hex(&time), "0000015e1867abae00000005");
    for extension in ["log", "index", "timeindex"] {
        let name = format!("00000000000000000050.{extension}");
        assert!(dir.path().join(&name).is_file(), "{name}");
        assert!(segment_file(dir.path(), 0, extension).is_file());
    }
    // Sealing segment 0 added its final time entry: the largest timestamp, at offset 49.
    let sealed = time_index(&fs::read(segment_file(dir.path(), 0, "timeindex")).unwrap());
    assert_eq!(
        sealed.last(),
        Some(&TimeIndexEntry {
            timestamp: start + 49,
            relative_offset: 49
        })
    );
    let found = partition.offsets_for_times(1_503_648_000_942).unwrap();
    assert_eq!(found.map(|f| f.offset), Some(55));
    assert_eq!(partition.read_records(55, 1).unwrap()[0].offset, 55);
}

#[test]
fn index_entries_point_at_entries_and_times_hold_the_running_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 200,
        ..LogConfig::default()
    };
    let (mut partition, _) = open(dir.path(), &config);
    let mut rng = Rng(7);
    for _ in 0..40 {
        let rows: Vec<_> = (0..1 + rng.below(4))
            .map(|i| row(NOW + rng.below(1000) as i64, &format!("k{i}"), "value"))
            .collect();
        append_rows(&mut partition, &rows, NOW).unwrap();
    }
    partition.flush().unwrap();
    let log = fs::read(segment_file(dir.path(), 0, "log")).unwrap();
    let entries = entry_positions(&log);
    let index = offset_index(&fs::read(segment_file(dir.path(), 0, "index")).unwrap());
    assert!(index.len() > 5);
    let mut last_position = 0;
    for entry in &index {
        let position = entry.position as usize;
        assert!(entries.contains(&(position, i64::from(entry.relative_offset))));
        assert!(position - last_position > 200 || last_position == 0);
        last_position = position;
    }
    let records = read_all(&partition, 1 << 20);
    let times = time_index(&fs::read(segment_file(dir.path(), 0, "timeindex")).unwrap());
    assert!(!times.is_empty());
    for entry in times {
        let upto = records
            .iter()
            .filter(|r| r.offset <= i64::from(entry.relative_offset))
            .map(|r| r.timestamp)
            .max();
        assert_eq!(upto, Some(entry.timestamp));
    }
}

// ---------------------------------------------------------------------------------------------
// Append and read

#[test]
fn append_read_and_time_lookup_match_a_model() {
    for compression in ALL_COMPRESSIONS {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 2000,
            index_interval_bytes: 100,
            compression,
            ..LogConfig::default()
        };
        let (mut partition, report) = open(dir.path(), &config);
        assert!(report.created && report.is_clean());
        let mut model = Model::default();
        let mut rng = Rng(42);
        for _ in 0..120 {
            let rows: Vec<_> = (0..1 + rng.below(5))
                .map(|_| {
                    let value_len = rng.below(60) as usize;
                    let key_len = 1 + rng.below(8) as usize;
                    let key = (rng.below(3) > 0).then(|| rng.bytes(key_len));
                    let value = (rng.below(8) > 0).then(|| rng.bytes(value_len));
                    let timestamp = if rng.below(10) == 0 {
                        -1
                    } else {
                        NOW + rng.below(10_000) as i64
                    };
                    (timestamp, key, value)
                })
                .collect();
            let info = append_rows(&mut partition, &rows, NOW).unwrap();
            assert_eq!(info.first_offset, model.log_end_offset);
            assert_eq!(
                info.last_offset,
                model.log_end_offset + rows.len() as i64 - 1
            );
            assert_eq!(info.log_append_time, -1);
            model.append(&rows);
        }
        assert!(partition.segments().len() > 3, "{compression:?}");
        assert_matches_model(&partition, &model, &mut rng);
        // Every offset reads from itself.
        for offset in 0..model.log_end_offset {
            let first = &partition.read_records(offset, 1).unwrap()[0];
            assert_eq!(first.offset, offset);
        }
        assert!(partition
            .read(model.log_end_offset, 100)
            .unwrap()
            .is_empty());
        assert!(partition.read(model.log_end_offset + 1, 100).is_err());
        assert!(partition.offsets_for_times(-1).is_err());
    }
}

#[test]
fn a_read_returns_whole_entries_up_to_max_bytes_but_at_least_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut partition, _) = open(dir.path(), &LogConfig::default());
    let rows: Vec<_> = (0..10)
        .map(|i| row(NOW, "k", &"v".repeat(i * 10)))
        .collect();
    append_rows(&mut partition, &rows, NOW).unwrap();
    let one = partition.read(0, 1).unwrap();
    assert_eq!(entry_positions(&one).len(), 1);
    let some = partition.read(3, 200).unwrap();
    assert!(some.len() <= 200);
    let entries = entry_positions(&some);
    assert_eq!(entries.first().map(|e| e.1), Some(3));
    let next_size = 12 + 22 + 1 + (3 + entries.len()) * 10;
    assert!(some.len() + next_size > 200);
    assert_eq!(
        partition.read(0, 1 << 20).unwrap().len() as u64,
        partition.size_bytes()
    );
}

#[test]
fn columns_append_like_rows() {
    let timestamps = [NOW, NOW + 1, -1];
    let keys_in: [Option<&[u8]>; 3] = [Some(b"a"), None, Some(b"")];
    let values_in: [Option<&[u8]>; 3] = [Some(b"1"), Some(b"2"), None];
    let mut keys = BinaryBuilder::new(0, false);
    let mut values = BinaryBuilder::new(0, false);
    for (key, value) in keys_in.iter().zip(values_in) {
        keys.push(*key).unwrap();
        values.push(value).unwrap();
    }
    fn column(built: &BinaryBuilder) -> BinaryColumn<'_> {
        BinaryColumn::parse(
            &built.offsets,
            &built.data,
            Some(&built.validity),
            0,
            3,
            false,
        )
        .unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut partition, _) = open(dir.path(), &LogConfig::default());
    let info = partition
        .append_columns(&timestamps, &column(&keys), &column(&values), NOW)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    let read: Vec<_> = read_all(&partition, 1 << 20)
        .into_iter()
        .map(|r| (r.timestamp, r.key, r.value))
        .collect();
    let expected: Vec<_> = (0..3)
        .map(|i| {
            (
                timestamps[i],
                keys_in[i].map(<[u8]>::to_vec),
                values_in[i].map(<[u8]>::to_vec),
            )
        })
        .collect();
    assert_eq!(read, expected);
    let error = partition
        .append_columns(&timestamps[..2], &column(&keys), &column(&values), NOW)
        .unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)));
}

// ---------------------------------------------------------------------------------------------
// Rolling

#[test]
fn segments_roll_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), &small_segments(), 35);
    let (partition, report) = open(dir.path(), &small_segments());
    assert!(report.is_clean(), "{report:?}");
    let segments = partition.segments();
    // 100-byte entries, 1000-byte segments: 10 entries each.
    let bases: Vec<i64> = segments.iter().map(|s| s.base_offset).collect();
    assert_eq!(bases, [0, 10, 20, 30]);
    assert!(segments.iter().all(|s| s.size_bytes <= 1000));
    assert_eq!(segments[0].max_timestamp, NOW + 9);
    assert_eq!(read_all(&partition, 1 << 20), model.records);
}

#[test]
fn segments_roll_by_time_from_the_first_timestamp_or_creation() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let (mut partition, _) = open(dir.path(), &config);
    let rolled = |p: &mut Partition, timestamp: i64, now_ms: i64| {
        append_rows(p, &[row(timestamp, "k", "v")], now_ms)
            .unwrap()
            .rolled
    };
    assert!(!rolled(&mut partition, 5000, NOW));
    assert!(!rolled(&mut partition, 6000, NOW)); // 1000 after the first: not more
    assert!(rolled(&mut partition, 6001, NOW));
    assert!(!rolled(&mut partition, 100, NOW)); // older is fine
    assert_eq!(partition.segments().len(), 2);
    // No timestamps: measured from the segment's creation (the roll at NOW) to now.
    let dir = tempfile::tempdir().unwrap();
    let (mut partition, _) = open(dir.path(), &config);
    assert!(!rolled(&mut partition, -1, NOW));
    assert!(!rolled(&mut partition, -1, NOW + 1000));
    assert!(rolled(&mut partition, -1, NOW + 1001));
    assert!(!rolled(&mut partition, -1, NOW + 2001));
    assert!(rolled(&mut partition, -1, NOW + 2002));
}

// ---------------------------------------------------------------------------------------------
// Reopening and crash damage

#[test]
fn reopening_keeps_records_and_the_next_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build_log(dir.path(), &small_segments(), 25);
    for flush in [true, false] {
        let (mut partition, report) = open(dir.path(), &small_segments());
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.log_end_offset, model.log_end_offset);
        let rows = [row(NOW, "again", "x")];
        let info = append_rows(&mut partition, &rows, NOW).unwrap();
        assert_eq!(info.first_offset, model.log_end_offset);
        model.append(&rows);
        if flush {
            partition.flush().unwrap();
        }
        drop(partition);
    }
    let (partition, report) = open(dir.path(), &small_segments());
    assert!(report.is_clean(), "{report:?}");
    assert_matches_model(&partition, &model, &mut Rng(1));
}

#[test]
fn a_clean_close_is_reopened_unscanned_unless_its_files_changed_or_the_process_crashed() {
    const CLEAN_SHUTDOWN: &str = ".kstate-cleanshutdown";
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 150,
        ..LogConfig::default()
    };
    let mut model = build_log(dir.path(), &config, 200);
    let log = segment_file(dir.path(), 0, "log");
    let entries = entry_positions(&fs::read(&log).unwrap());
    let again = |partition: &mut Partition, model: &mut Model, what: &str| {
        let rows = [row(NOW + 1_000, what, "x")];
        let info = append_rows(partition, &rows, NOW).unwrap();
        assert_eq!(info.first_offset, model.log_end_offset, "{what}");
        model.append(&rows);
    };

    // Closed cleanly: the clean-shutdown file on disk (what any process reopening reads) lets
    // the segment be taken as it was, and it stays right; opening removes the file.
    let marker = dir.path().join(CLEAN_SHUTDOWN);
    assert!(marker.exists());
    let (mut partition, report) = open(dir.path(), &config);
    assert!(report.reopened_clean && report.is_clean(), "{report:?}");
    assert!(
        !marker.exists(),
        "an open partition has no clean-shutdown file"
    );
    assert_eq!(report.log_end_offset, 200);
    assert_matches_model(&partition, &model, &mut Rng(5));
    again(&mut partition, &mut model, "after a clean reopen");
    partition.close().unwrap();
    let (partition, report) = open(dir.path(), &config);
    assert!(report.reopened_clean, "{report:?}");
    assert_matches_model(&partition, &model, &mut Rng(6));
    partition.close().unwrap();

    // A damaged clean-shutdown file (a digit changed: its CRC no longer matches): scanned.
    let text = fs::read_to_string(&marker).unwrap();
    let digit = text
        .rfind(|c: char| c.is_ascii_digit() && c != '9')
        .unwrap();
    let mut damaged = text.into_bytes();
    damaged[digit] += 1;
    fs::write(&marker, damaged).unwrap();
    let (partition, report) = open(dir.path(), &config);
    assert!(!report.reopened_clean && report.is_clean(), "{report:?}");
    assert!(!marker.exists());
    partition.close().unwrap();

    // An index file rewritten behind its back (same bytes, a new change time): scanned.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let index = segment_file(dir.path(), 0, "index");
    fs::write(&index, fs::read(&index).unwrap()).unwrap();
    let (partition, report) = open(dir.path(), &config);
    assert!(!report.reopened_clean && report.is_clean(), "{report:?}");
    assert_matches_model(&partition, &model, &mut Rng(9));
    partition.close().unwrap();

    // A config with another index interval: scanned (and its indexes rebuilt to it).
    let wider = LogConfig {
        index_interval_bytes: 300,
        ..config.clone()
    };
    let (partition, report) = open(dir.path(), &wider);
    assert!(!report.reopened_clean, "{report:?}");
    partition.close().unwrap();
    let (partition, report) = open(dir.path(), &config);
    assert!(!report.reopened_clean, "{report:?}");
    partition.close().unwrap();

    // Written behind its back after the close (same length, a byte of the first entry flipped:
    // beyond the log's compared tail): scanned, the damage found.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut bytes = fs::read(&log).unwrap();
    bytes[entries[1].0 - 1] ^= 0x01;
    fs::write(&log, &bytes).unwrap();
    let (partition, report) = open(dir.path(), &config);
    assert!(!report.reopened_clean, "{report:?}");
    let tail = report.truncated_tail.expect("the flipped entry is found");
    assert_eq!(tail.position, entries[0].0 as u64);
    model.truncate_to(0);
    assert_matches_model(&partition, &model, &mut Rng(7));
    drop(partition);

    // A process that stops without closing (a crash: opening had removed the clean-shutdown
    // file) is scanned, and a torn append is cut off.
    let (mut partition, _) = open(dir.path(), &config);
    again(&mut partition, &mut model, "before the crash");
    partition.flush().unwrap();
    drop(partition);
    assert!(!marker.exists());
    let end = fs::metadata(&log).unwrap().len();
    let mut bytes = fs::read(&log).unwrap();
    bytes.extend_from_slice(&[0x5a; 37]);
    fs::write(&log, &bytes).unwrap();
    let (partition, report) = open(dir.path(), &config);
    assert!(!report.reopened_clean, "{report:?}");
    assert_eq!(report.truncated_tail.expect("torn tail").position, end);
    assert_matches_model(&partition, &model, &mut Rng(8));
}

#[test]
fn a_damaged_or_inconsistent_clean_shutdown_file_means_a_scan_never_a_wrong_log() {
    const CLEAN_SHUTDOWN: &str = ".kstate-cleanshutdown";
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 150,
        ..LogConfig::default()
    };
    let mut model = build_log(dir.path(), &config, 120);
    let marker = dir.path().join(CLEAN_SHUTDOWN);
    let mut rng = Rng(0x5eed);
    let mut reopened_clean = 0;
    for round in 0..300 {
        // What the last clean close wrote, for the files as they are now.
        let written = fs::read(&marker).unwrap();
        let mut bytes = written.clone();
        match rng.below(4) {
            0 => {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
            1 => bytes.truncate(rng.below(bytes.len() as u64) as usize),
            2 => {
                let at = rng.below(bytes.len() as u64) as usize;
                let junk: Vec<u8> = (0..1 + rng.below(12))
                    .map(|_| rng.below(256) as u8)
                    .collect();
                bytes.splice(at..at, junk);
            }
            // Well-formed with its CRC made to match, but a number changed: size, end offset,
            // an entry count or a file identity. Only a changed end offset cannot be told apart
            // from the files; every other field must make the open scan.
            _ => {
                let text = String::from_utf8(written.clone()).unwrap();
                let body = text.trim_end().rsplit_once(' ').unwrap().0;
                let mut words: Vec<String> = body.split(' ').map(str::to_owned).collect();
                // Words: 0 the version, 2 size, 10 / 11 index entry counts, 14-16 the log's
                // device, inode and length, 22 the offset index's inode.
                let field = [2, 10, 11, 14, 15, 16, 22][rng.below(7) as usize];
                let number: i64 = words[field].parse().unwrap();
                let change = 1 + rng.below(3) as i64;
                words[field] = (if rng.below(2) == 0 {
                    number + change
                } else {
                    number - change
                })
                .to_string();
                let body = words.join(" ");
                bytes = format!("{body} {}\n", crc32fast::hash(body.as_bytes())).into_bytes();
            }
        }
        fs::write(&marker, &bytes).unwrap();
        let (partition, report) = open(dir.path(), &config);
        assert!(!marker.exists(), "round {round}: opening removes the file");
        reopened_clean += usize::from(report.reopened_clean);
        assert!(
            !report.reopened_clean || bytes == written,
            "round {round}: a changed file was trusted: {report:?}"
        );
        assert_eq!(report.log_end_offset, model.log_end_offset, "round {round}");
        assert_matches_model(&partition, &model, &mut Rng(round + 1));
        partition.close().unwrap();
    }
    assert_eq!(reopened_clean, 0);
    // The file written by the last clean close is still trusted.
    let (mut partition, report) = open(dir.path(), &config);
    assert!(report.reopened_clean, "{report:?}");
    let rows = [row(NOW, "after", "x")];
    append_rows(&mut partition, &rows, NOW).unwrap();
    model.append(&rows);
    assert_matches_model(&partition, &model, &mut Rng(3));
}

#[test]
fn a_directory_is_opened_by_one_partition_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (_partition, _) = open(dir.path(), &LogConfig::default());
    let second = Partition::open(dir.path(), LogConfig::default());
    assert!(matches!(second, Err(Error::InvalidState(_))));
}

/// Damages the last segment's `.log`; returns the offset of the first record that is lost.
type Damage = fn(&Path, &[(usize, i64)]) -> (usize, Option<i64>);

#[test]
fn torn_and_corrupt_tails_are_cut_back_to_the_last_whole_entry() {
    let garbage: Damage = |log, _| {
        let mut bytes = fs::read(log).unwrap();
        let end = bytes.len();
        bytes.extend_from_slice(&[0x5a; 37]);
        fs::write(log, bytes).unwrap();
        (end, None)
    };
    let zeros: Damage = |log, _| {
        let mut bytes = fs::read(log).unwrap();
        let end = bytes.len();
        bytes.extend_from_slice(&[0; 4096]);
        fs::write(log, bytes).unwrap();
        (end, None)
    };
    let cut_mid_entry: Damage = |log, entries| {
        let bytes = fs::read(log).unwrap();
        let (position, offset) = *entries.last().unwrap();
        fs::write(log, &bytes[..bytes.len() - 10]).unwrap();
        (position, Some(offset))
    };
    let cut_in_header: Damage = |log, entries| {
        let bytes = fs::read(log).unwrap();
        let (position, offset) = *entries.last().unwrap();
        fs::write(log, &bytes[..position + 7]).unwrap();
        (position, Some(offset))
    };
    let flip_last_crc: Damage = |log, entries| {
        let mut bytes = fs::read(log).unwrap();
        let (position, offset) = *entries.last().unwrap();
        bytes[position + 12] ^= 0xff;
        fs::write(log, bytes).unwrap();
        (position, Some(offset))
    };
    let flip_first_value_byte: Damage = |log, entries| {
        let mut bytes = fs::read(log).unwrap();
        let (position, offset) = entries[0];
        let (next, _) = entries[1];
        bytes[next - 1] ^= 0x01;
        fs::write(log, bytes).unwrap();
        (position, Some(offset))
    };
    let offset_backwards: Damage = |log, entries| {
        let mut bytes = fs::read(log).unwrap();
        let (position, offset) = *entries.last().unwrap();
        bytes[position..position + 8].copy_from_slice(&0i64.to_be_bytes());
        fs::write(log, bytes).unwrap();
        (position, Some(offset))
    };
    let damages = [
        ("garbage", garbage),
        ("zeros", zeros),
        ("cut mid entry", cut_mid_entry),
        ("cut in header", cut_in_header),
        ("flipped crc", flip_last_crc),
        ("flipped value", flip_first_value_byte),
        ("offset backwards", offset_backwards),
    ];
    for (name, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let mut model = build_log(dir.path(), &small_segments(), 27);
        let last_base = 20;
        let log = segment_file(dir.path(), last_base, "log");
        let entries = entry_positions(&fs::read(&log).unwrap());
        let old_size = fs::metadata(&log).unwrap().len();
        let (cut_at, first_lost) = damage(&log, &entries);
        if let Some(first_lost) = first_lost {
            model.truncate_to(first_lost);
        }

        let (mut partition, report) = open(dir.path(), &small_segments());
        let tail = report
            .truncated_tail
            .clone()
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(tail.base_offset, last_base, "{name}");
        assert_eq!(tail.position, cut_at as u64, "{name}: {}", tail.problem);
        assert_eq!(fs::metadata(&log).unwrap().len(), cut_at as u64, "{name}");
        if first_lost.is_none() {
            assert_eq!(cut_at as u64, old_size);
        }
        assert_matches_model(&partition, &model, &mut Rng(3));
        let rows = [row(NOW, "after", "crash")];
        let info = append_rows(&mut partition, &rows, NOW).unwrap();
        assert_eq!(info.first_offset, model.log_end_offset, "{name}");
        model.append(&rows);
        drop(partition);
        let (partition, report) = open(dir.path(), &small_segments());
        assert!(report.is_clean(), "{name}: {report:?}");
        assert_matches_model(&partition, &model, &mut Rng(4));
    }
}

#[test]
fn garbage_files_never_panic() {
    let mut rng = Rng(99);
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let len = rng.below(3000) as usize;
        fs::write(segment_file(dir.path(), 0, "log"), rng.bytes(len)).unwrap();
        fs::write(segment_file(dir.path(), 0, "index"), rng.bytes(len % 100)).unwrap();
        fs::write(
            segment_file(dir.path(), 0, "timeindex"),
            rng.bytes(len % 50),
        )
        .unwrap();
        if round % 2 == 0 {
            // A garbage sealed segment: an error (sealed segments were fsynced), not a panic.
            fs::write(segment_file(dir.path(), 100, "log"), rng.bytes(len)).unwrap();
            let _ = Partition::open(dir.path(), LogConfig::default());
            continue;
        }
        let (partition, report) = open(dir.path(), &LogConfig::default());
        assert_eq!(partition.log_start_offset(), 0);
        assert!(report.truncated_tail.is_some() || len == 0);
    }
}

#[test]
fn missing_or_wrong_indexes_are_rebuilt_and_lookups_stay_right() {
    type Damage = fn(&Path);
    let sealed = 10;
    let active = 20;
    let damages: [(&str, i64, Damage); 8] = [
        ("sealed index deleted", sealed, |dir| {
            fs::remove_file(segment_file(dir, 10, "index")).unwrap()
        }),
        ("sealed time index odd length", sealed, |dir| {
            let path = segment_file(dir, 10, "timeindex");
            let bytes = fs::read(&path).unwrap();
            fs::write(&path, &bytes[..13]).unwrap();
        }),
        ("sealed index out of order", sealed, |dir| {
            let path = segment_file(dir, 10, "index");
            let mut bytes = fs::read(&path).unwrap();
            bytes.rotate_left(8);
            fs::write(&path, bytes).unwrap();
        }),
        ("sealed index past the end", sealed, |dir| {
            let path = segment_file(dir, 10, "index");
            let mut bytes = fs::read(&path).unwrap();
            bytes.extend_from_slice(&hex_bytes("0000000900100000"));
            fs::write(&path, bytes).unwrap();
        }),
        ("sealed index points between entries", sealed, |dir| {
            let path = segment_file(dir, 10, "index");
            let mut bytes = fs::read(&path).unwrap();
            let last = bytes.len() - 1;
            bytes[last] = bytes[last].wrapping_add(1);
            fs::write(&path, bytes).unwrap();
        }),
        (
            "sealed index points at the log's last bytes",
            sealed,
            |dir| {
                let log_size = fs::metadata(segment_file(dir, 10, "log")).unwrap().len();
                let path = segment_file(dir, 10, "index");
                let mut bytes = fs::read(&path).unwrap();
                bytes.extend_from_slice(&9i32.to_be_bytes());
                bytes.extend_from_slice(&(log_size as i32 - 3).to_be_bytes());
                fs::write(&path, bytes).unwrap();
            },
        ),
        ("active index deleted", active, |dir| {
            fs::remove_file(segment_file(dir, 20, "index")).unwrap()
        }),
        ("active time index from another log", active, |dir| {
            let path = segment_file(dir, 20, "timeindex");
            fs::write(
                &path,
                hex_bytes("0000000000000005000000010000000000000009 00000002"),
            )
            .unwrap();
        }),
    ];
    let config = LogConfig {
        index_interval_bytes: 150,
        ..small_segments()
    };
    for (name, base, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let model = build_log(dir.path(), &config, 27);
        let originals: Vec<Vec<u8>> = ["index", "timeindex"]
            .iter()
            .map(|extension| fs::read(segment_file(dir.path(), base, extension)).unwrap())
            .collect();
        assert!(
            originals[0].len() >= 8,
            "{name}: the test needs index entries"
        );
        damage(dir.path());
        let (partition, report) = open(dir.path(), &config);
        let rebuilt: Vec<i64> = report
            .rebuilt_indexes
            .iter()
            .map(|(base, _)| *base)
            .collect();
        assert_eq!(rebuilt, [base], "{name}: {report:?}");
        assert!(report.truncated_tail.is_none());
        assert_matches_model(&partition, &model, &mut Rng(5));
        for offset in 0..model.log_end_offset {
            assert_eq!(partition.read_records(offset, 1).unwrap()[0].offset, offset);
        }
        // The rebuild gives the very bytes the appends wrote.
        partition.close().unwrap();
        for (extension, original) in ["index", "timeindex"].iter().zip(&originals) {
            let now = fs::read(segment_file(dir.path(), base, extension)).unwrap();
            assert_eq!(&now, original, "{name}: {extension}");
        }
        let (_, report) = open(dir.path(), &config);
        assert!(report.is_clean(), "{name}: {report:?}");
    }
}

#[test]
fn kafkas_preallocated_zero_filled_index_tails_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_segments();
    let model = build_log(dir.path(), &config, 27);
    for base in [10, 20] {
        for (extension, entry_size) in [("index", 8), ("timeindex", 12)] {
            let path = segment_file(dir.path(), base, extension);
            let mut bytes = fs::read(&path).unwrap();
            bytes.extend(std::iter::repeat_n(0, entry_size * 100));
            fs::write(&path, bytes).unwrap();
        }
    }
    let (partition, report) = open(dir.path(), &config);
    assert!(report.is_clean(), "{report:?}");
    assert_matches_model(&partition, &model, &mut Rng(6));
    let index = fs::read(segment_file(dir.path(), 10, "index")).unwrap();
    assert!(index.len() < 800 && !index.is_empty());
}

fn hex_bytes(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Timestamps (spec 3.6)

#[test]
fn out_of_range_timestamps_reject_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        message_timestamp_before_max_ms: 1000,
        message_timestamp_after_max_ms: 100,
        ..LogConfig::default()
    };
    let (mut partition, _) = open(dir.path(), &config);
    append_rows(&mut partition, &[row(NOW, "k", "v")], NOW).unwrap();
    let size = partition.size_bytes();
    let batch = [
        row(NOW - 1000, "a", "in range"),
        row(NOW - 1001, "b", "too old"),
        row(NOW + 101, "c", "too new"),
        (-1, Some(b"d".to_vec()), None),
    ];
    let error = append_rows(&mut partition, &batch, NOW).unwrap_err();
    let Error::InvalidTimestamp(message) = error else {
        panic!("{error:?}")
    };
    assert!(message.starts_with(INVALID_TIMESTAMP), "{message}");
    assert!(message.contains("2 of 4 records"), "{message}");
    assert!(message.contains(&format!("[{}, {}]", NOW - 1000, NOW + 100)));
    assert_eq!(partition.log_end_offset(), 1);
    assert_eq!(partition.size_bytes(), size);
    let ok = append_rows(&mut partition, &batch[..1], NOW).unwrap();
    assert_eq!(ok.first_offset, 1);

    // The deprecated config bounds both sides while the new ones are at their defaults.
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::default();
    config
        .set("message.timestamp.difference.max.ms", "10")
        .unwrap();
    let (mut partition, _) = open(dir.path(), &config);
    assert!(append_rows(&mut partition, &[row(NOW - 11, "k", "v")], NOW).is_err());
    assert!(append_rows(&mut partition, &[row(NOW + 11, "k", "v")], NOW).is_err());
    assert!(append_rows(&mut partition, &[row(NOW + 10, "k", "v")], NOW).is_ok());
    assert!(append_rows(&mut partition, &[row(-2, "k", "v")], NOW).is_err());
}

#[test]
fn log_append_time_stamps_every_record_with_now() {
    for compression in [Compression::None, Compression::Gzip] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            message_timestamp_before_max_ms: 0,
            compression,
            ..LogConfig::default()
        };
        let (mut partition, _) = open(dir.path(), &config);
        let rows = [row(5, "a", "1"), row(-1, "b", "2")];
        let info = append_rows(&mut partition, &rows, NOW).unwrap();
        assert_eq!((info.log_append_time, info.max_timestamp), (NOW, NOW));
        append_rows(&mut partition, &rows, NOW + 10).unwrap();
        let records = partition.read_records(0, 1 << 20).unwrap();
        let stamps: Vec<_> = records
            .iter()
            .map(|r| (r.timestamp, r.timestamp_type))
            .collect();
        let append = Some(TimestampType::LogAppendTime);
        assert_eq!(
            stamps,
            [
                (NOW, append),
                (NOW, append),
                (NOW + 10, append),
                (NOW + 10, append)
            ]
        );
        let found = partition.offsets_for_times(NOW + 1).unwrap().unwrap();
        assert_eq!((found.timestamp, found.offset), (NOW + 10, 2));
        assert!(append_rows(&mut partition, &rows, -1).is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation

#[test]
fn truncate_to_cuts_across_segment_boundaries() {
    for target in [0, 5, 10, 15, 26, 27, 40] {
        let dir = tempfile::tempdir().unwrap();
        let mut model = build_log(dir.path(), &small_segments(), 27);
        let (mut partition, _) = open(dir.path(), &small_segments());
        partition.truncate_to(target).unwrap();
        model.truncate_to(target);
        assert_matches_model(&partition, &model, &mut Rng(8));
        let bases: Vec<i64> = partition.segments().iter().map(|s| s.base_offset).collect();
        assert!(
            bases.iter().all(|&base| base <= target.max(20)),
            "{bases:?}"
        );
        for base in [10, 20] {
            assert_eq!(
                segment_file(dir.path(), base, "log").exists(),
                base <= target
            );
        }
        let rows = [row(NOW, "next", "1")];
        assert_eq!(
            append_rows(&mut partition, &rows, NOW)
                .unwrap()
                .first_offset,
            model.log_end_offset
        );
        model.append(&rows);
        drop(partition);
        let (partition, report) = open(dir.path(), &small_segments());
        assert!(report.is_clean(), "{target}: {report:?}");
        assert_matches_model(&partition, &model, &mut Rng(9));
    }
}

#[test]
fn truncate_to_inside_a_compressed_wrapper_keeps_the_records_below() {
    for compression in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            compression,
            ..LogConfig::default()
        };
        let (mut partition, _) = open(dir.path(), &config);
        let mut model = Model::default();
        for batch in 0..3 {
            let rows: Vec<_> = (0..5)
                .map(|i| row(NOW + batch * 10 + i, &format!("k{i}"), &format!("{batch}")))
                .collect();
            append_rows(&mut partition, &rows, NOW).unwrap();
            model.append(&rows);
        }
        partition.truncate_to(7).unwrap();
        model.truncate_to(7);
        assert_matches_model(&partition, &model, &mut Rng(10));
        drop(partition);
        let (partition, report) = open(dir.path(), &config);
        assert!(report.is_clean(), "{report:?}");
        assert_matches_model(&partition, &model, &mut Rng(11));
    }
}

#[test]
fn truncate_below_the_log_start_restarts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    build_log(dir.path(), &small_segments(), 27);
    let config = LogConfig {
        retention_ms: 0,
        ..small_segments()
    };
    let (mut partition, _) = open(dir.path(), &config);
    partition.delete_expired(NOW + 15).unwrap(); // offsets 0..9 are older than NOW + 15
    assert_eq!(partition.log_start_offset(), 10);
    partition.truncate_to(4).unwrap();
    assert_eq!(
        (partition.log_start_offset(), partition.log_end_offset()),
        (4, 4)
    );
    assert!(read_all(&partition, 1 << 20).is_empty());
    drop(partition);
    let (partition, _) = open(dir.path(), &config);
    assert_eq!(partition.log_end_offset(), 4);
    assert_eq!(partition.segments().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Retention

#[test]
fn retention_deletes_old_segments_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), &small_segments(), 27); // bases 0, 10, 20
    let config = LogConfig {
        retention_ms: 100,
        ..small_segments()
    };
    let (mut partition, _) = open(dir.path(), &config);
    // Segment 0's largest timestamp is NOW + 9, segment 10's NOW + 19.
    let report = partition.delete_expired(NOW + 9 + 100).unwrap();
    assert_eq!(report.deleted_by_time, 0);
    let report = partition.delete_expired(NOW + 19 + 100).unwrap();
    assert_eq!((report.deleted_by_time, report.log_start_offset), (1, 10));
    assert!(!segment_file(dir.path(), 0, "log").exists());
    let report = partition.delete_expired(NOW + 19 + 101).unwrap();
    assert_eq!((report.deleted_by_time, report.log_start_offset), (1, 20));
    assert!(!report.rolled_active);
    assert_eq!(read_all(&partition, 1 << 20), model.records[20..]);
    assert!(partition.read(19, 100).is_err());
    // Everything expired: the active segment is rolled first, the log end offset stays.
    let report = partition.delete_expired(NOW + 10_000).unwrap();
    assert!(report.rolled_active);
    assert_eq!(partition.log_start_offset(), 27);
    assert_eq!(partition.log_end_offset(), 27);
    assert!(read_all(&partition, 1 << 20).is_empty());
    // ... and an empty active segment is never deleted.
    let report = partition.delete_expired(NOW + 20_000).unwrap();
    assert_eq!(report.deleted_by_time, 0);
    drop(partition);
    let (partition, report) = open(dir.path(), &config);
    assert!(report.is_clean());
    assert_eq!(partition.log_end_offset(), 27);
}

#[test]
fn retention_deletes_old_segments_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), &small_segments(), 35); // 10 x 100 bytes per segment
    let config = LogConfig {
        retention_ms: -1,
        retention_bytes: 1600,
        ..small_segments()
    };
    let (mut partition, _) = open(dir.path(), &config);
    let report = partition.delete_expired(NOW).unwrap();
    // 3500 bytes: without segment 0 the log is 2500 >= 1600; without 10 too it would be
    // 1500 < 1600, so only segment 0 goes.
    assert_eq!(report.deleted_by_size, 1);
    assert_eq!(report.bytes_deleted, 1000);
    assert_eq!(partition.size_bytes(), 2500);
    assert_eq!(read_all(&partition, 1 << 20), model.records[10..]);
    // Compact-only topics never delete.
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        retention_bytes: 0,
        ..small_segments()
    };
    drop(partition);
    let (mut partition, _) = open(dir.path(), &config);
    assert_eq!(partition.delete_expired(NOW).unwrap().deleted_by_size, 0);
}

#[test]
fn a_cache_drops_the_segments_its_reader_is_past() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), &small_segments(), 35); // segments at 0, 10, 20, 30
    let (mut partition, _) = open(dir.path(), &small_segments());
    // Offset 19 is still needed: the segment at 10 stays.
    let report = partition.delete_segments_below(19, NOW).unwrap();
    assert_eq!(
        (report.deleted_below_offset, report.log_start_offset),
        (1, 10)
    );
    assert_eq!(report.bytes_deleted, 1000);
    assert_eq!(read_all(&partition, 1 << 20), model.records[10..]);
    // Past everything: the active segment stays, whatever the policy.
    let report = partition.delete_segments_below(1000, NOW).unwrap();
    assert_eq!(
        (report.deleted_below_offset, report.log_start_offset),
        (2, 30)
    );
    assert_eq!(partition.log_end_offset(), 35);
    assert_eq!(read_all(&partition, 1 << 20), model.records[30..]);
    drop(partition);
    let (partition, _) = open(dir.path(), &small_segments());
    assert_eq!(partition.log_start_offset(), 30);
}

#[test]
fn records_deleted_before_an_offset_stay_deleted_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_log(dir.path(), &small_segments(), 35); // segments at 0, 10, 20, 30
    let (mut partition, _) = open(dir.path(), &small_segments());
    assert_eq!(partition.deleted_records_before(), 0);
    // Kafka's DeleteRecords: the start is the offset asked for, inside the segment at 10.
    let report = partition.delete_records_before(15, NOW).unwrap();
    assert_eq!(
        (report.deleted_below_offset, report.log_start_offset),
        (1, 15)
    );
    assert!(
        matches!(partition.read(14, 1 << 20), Err(Error::InvalidArgument(m)) if m.contains("OFFSET_OUT_OF_RANGE"))
    );
    assert_eq!(read_all(&partition, 1 << 20), model.records[15..]);
    // Lower or equal offsets change nothing; past the end is refused.
    let report = partition.delete_records_before(10, NOW).unwrap();
    assert_eq!(
        (report.deleted_below_offset, report.log_start_offset),
        (0, 15)
    );
    assert!(matches!(
        partition.delete_records_before(36, NOW),
        Err(Error::InvalidArgument(_))
    ));
    drop(partition);

    let (mut partition, report) = open(dir.path(), &small_segments());
    assert_eq!(report.log_start_offset, 15, "kept across reopening");
    assert_eq!(
        (
            partition.log_start_offset(),
            partition.deleted_records_before()
        ),
        (15, 15)
    );
    // Up to the end: every sealed segment goes, the active one stays but holds nothing readable.
    let report = partition.delete_records_before(35, NOW).unwrap();
    assert_eq!(
        (report.deleted_below_offset, report.log_start_offset),
        (2, 35)
    );
    assert!(read_all(&partition, 1 << 20).is_empty());
    append_rows(&mut partition, &[row(NOW, "k", "v")], NOW).unwrap();
    assert_eq!(partition.read_records(35, 1 << 20).unwrap().len(), 1);
    partition.close().unwrap();
    let (mut partition, _) = open(dir.path(), &small_segments());
    assert_eq!(
        (partition.log_start_offset(), partition.log_end_offset()),
        (35, 36)
    );
    // A truncation below the start restarts the log there, and the start moves down with it.
    partition.truncate_to(5).unwrap();
    assert_eq!(
        (partition.log_start_offset(), partition.log_end_offset()),
        (5, 5)
    );
    drop(partition);
    let (partition, _) = open(dir.path(), &small_segments());
    assert_eq!(
        (
            partition.log_start_offset(),
            partition.deleted_records_before()
        ),
        (5, 5)
    );
}

// ---------------------------------------------------------------------------------------------
// Compaction

fn compacted_config(compression: Compression) -> LogConfig {
    LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        segment_bytes: 400,
        index_interval_bytes: 50,
        delete_retention_ms: 1000,
        compression,
        ..LogConfig::default()
    }
}

/// The model after compacting every record below `active_base`.
fn compacted(
    model: &Model,
    active_base: i64,
    now_ms: i64,
    delete_retention_ms: i64,
) -> Vec<Stored> {
    let latest = |record: &Stored| {
        model
            .records
            .iter()
            .rev()
            .find(|other| other.key == record.key)
            .map(|other| other.offset)
    };
    model
        .records
        .iter()
        .filter(|record| {
            record.offset >= active_base
                || (latest(record) == Some(record.offset)
                    && !(record.value.is_none()
                        && record.timestamp >= 0
                        && now_ms - record.timestamp > delete_retention_ms))
        })
        .cloned()
        .collect()
}

#[test]
fn compaction_keeps_the_latest_record_per_key_with_its_offset() {
    for compression in ALL_COMPRESSIONS {
        let dir = tempfile::tempdir().unwrap();
        let config = compacted_config(compression);
        let (mut partition, _) = open(dir.path(), &config);
        let mut model = Model::default();
        let mut rng = Rng(77);
        for round in 0..40 {
            let rows: Vec<_> = (0..1 + rng.below(3))
                .map(|_| {
                    let key = format!("key{}", rng.below(6));
                    let value = format!("value {round}");
                    (
                        NOW + round,
                        Some(key.into_bytes()),
                        Some(value.into_bytes()),
                    )
                })
                .collect();
            append_rows(&mut partition, &rows, NOW).unwrap();
            model.append(&rows);
        }
        // An old tombstone (removed) and a recent one (kept).
        let tombstones = [
            (NOW - 5000, Some(b"key1".to_vec()), None),
            (NOW + 100, Some(b"key2".to_vec()), None),
        ];
        append_rows(&mut partition, &tombstones, NOW).unwrap();
        model.append(&tombstones);
        partition.roll(NOW).unwrap();
        // Records in the active segment still supersede older ones.
        let newest = [row(NOW + 200, "key3", "newest")];
        append_rows(&mut partition, &newest, NOW).unwrap();
        model.append(&newest);

        let active_base = partition.segments().last().unwrap().base_offset;
        let before = partition.segments().len();
        let report = partition.compact(NOW + 500).unwrap();
        let expected = compacted(&model, active_base, NOW + 500, 1000);
        assert_eq!(read_all(&partition, 1 << 20), expected, "{compression:?}");
        assert_eq!(report.tombstones_removed, 1);
        assert_eq!(report.distinct_keys, 6);
        assert!(report.superseded_removed > 0);
        assert!(expected
            .iter()
            .any(|r| r.key.as_deref() == Some(b"key2") && r.value.is_none()));
        // Offsets are kept, so lookups by offset and time still agree with the model.
        model.records = expected;
        assert_matches_model(&partition, &model, &mut rng);
        // Cleaned segments are small, so compacting again merges them until nothing changes.
        for _ in 0..10 {
            let report = partition.compact(NOW + 500).unwrap();
            assert_eq!(read_all(&partition, 1 << 20), model.records);
            if report.groups_cleaned == 0 {
                break;
            }
        }
        assert!(
            partition.segments().len() < before / 2,
            "{:?}",
            partition.segments()
        );
        assert_eq!(partition.compact(NOW + 500).unwrap().groups_cleaned, 0);
        drop(partition);
        let (partition, report) = open(dir.path(), &config);
        assert!(report.is_clean(), "{report:?}");
        assert_matches_model(&partition, &model, &mut rng);
    }
}

#[test]
fn compacted_topics_reject_keyless_records() {
    let dir = tempfile::tempdir().unwrap();
    let (mut partition, _) = open(dir.path(), &compacted_config(Compression::None));
    let error = append_rows(&mut partition, &[(NOW, None, Some(b"v".to_vec()))], NOW).unwrap_err();
    assert!(error.to_string().contains("INVALID_RECORD"), "{error}");
    assert_eq!(partition.log_end_offset(), 0);
}

/// A log (`before`) and the same log compacted (`done`): sealed segments 0 and 4, which
/// compaction merges into one based at 0 holding only offset 7, and the active segment 8.
fn compaction_crash_fixture() -> (tempfile::TempDir, tempfile::TempDir, Model, Vec<Stored>) {
    let config = compacted_config(Compression::None);
    let before = tempfile::tempdir().unwrap();
    let (mut partition, _) = open(before.path(), &config);
    let mut model = Model::default();
    for round in 0..10 {
        let rows = [row(
            NOW + round,
            &format!("key{}", round % 3),
            &format!("v{round}"),
        )];
        append_rows(&mut partition, &rows, NOW).unwrap();
        model.append(&rows);
        if round == 3 || round == 7 {
            partition.roll(NOW).unwrap();
        }
    }
    drop(partition);
    let done = tempfile::tempdir().unwrap();
    copy_dir(before.path(), done.path());
    let (mut partition, _) = open(done.path(), &config);
    let report = partition.compact(NOW).unwrap();
    assert_eq!(report.groups_cleaned, 1, "{report:?}");
    let compacted = read_all(&partition, 1 << 20);
    let offsets: Vec<i64> = compacted.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [7, 8, 9]);
    drop(partition);
    (before, done, model, compacted)
}

#[test]
fn an_interrupted_compaction_is_finished_or_discarded_on_open() {
    let config = compacted_config(Compression::None);
    let sealed_bases = |dir: &Path| {
        let (partition, _) = open(dir, &config);
        let bases: Vec<i64> = partition.segments().iter().map(|s| s.base_offset).collect();
        bases[..bases.len() - 1].to_vec()
    };
    type Crash = fn(before: &Path, done: &Path, old_bases: &[i64]);
    let crashes: [(&str, bool, Crash); 6] = [
        ("cleaned files written", false, |before, done, _| {
            for extension in ["log", "index", "timeindex"] {
                let from = segment_file(done, 0, extension);
                fs::copy(
                    from,
                    before.join(format!("{}.{extension}.cleaned", filename_prefix(0))),
                )
                .unwrap();
            }
        }),
        (
            "indexes renamed to swap, log still cleaned",
            false,
            |before, done, _| {
                for (extension, suffix) in
                    [("log", "cleaned"), ("index", "swap"), ("timeindex", "swap")]
                {
                    let from = segment_file(done, 0, extension);
                    fs::copy(
                        from,
                        before.join(format!("{}.{extension}.{suffix}", filename_prefix(0))),
                    )
                    .unwrap();
                }
            },
        ),
        (
            "swap complete, old segments still there",
            true,
            |before, done, _| {
                for extension in ["log", "index", "timeindex"] {
                    let from = segment_file(done, 0, extension);
                    fs::copy(
                        from,
                        before.join(format!("{}.{extension}.swap", filename_prefix(0))),
                    )
                    .unwrap();
                }
            },
        ),
        ("old segments partly deleted", true, |before, done, _| {
            for extension in ["log", "index", "timeindex"] {
                let from = segment_file(done, 0, extension);
                fs::copy(
                    from,
                    before.join(format!("{}.{extension}.swap", filename_prefix(0))),
                )
                .unwrap();
                fs::rename(
                    segment_file(before, 0, extension),
                    before.join(format!("{}.{extension}.deleted", filename_prefix(0))),
                )
                .unwrap();
            }
        }),
        (
            "old segments deleted, swap indexes renamed live",
            true,
            |before, done, old_bases| {
                for &base in old_bases {
                    for extension in ["log", "index", "timeindex"] {
                        fs::remove_file(segment_file(before, base, extension)).unwrap();
                    }
                }
                for extension in ["index", "timeindex"] {
                    fs::copy(
                        segment_file(done, 0, extension),
                        segment_file(before, 0, extension),
                    )
                    .unwrap();
                }
                fs::copy(
                    segment_file(done, 0, "log"),
                    before.join(format!("{}.log.swap", filename_prefix(0))),
                )
                .unwrap();
            },
        ),
        (
            "a deletion left .deleted files",
            false,
            |before, _, old_bases| {
                let last = *old_bases.last().unwrap();
                fs::write(
                    before.join(format!("{}.log.deleted", filename_prefix(last + 1000))),
                    b"x",
                )
                .unwrap();
            },
        ),
    ];
    for (name, finished, crash) in crashes {
        let (before, done, model, compacted) = compaction_crash_fixture();
        let old_bases = sealed_bases(before.path());
        assert_eq!(old_bases, [0, 4]);
        crash(before.path(), done.path(), &old_bases);
        let (partition, report) = open(before.path(), &config);
        assert!(!report.is_clean(), "{name}");
        assert_eq!(
            report.completed_swaps.is_empty(),
            !finished,
            "{name}: {report:?}"
        );
        let expected = if finished { &compacted } else { &model.records };
        assert_eq!(&read_all(&partition, 1 << 20), expected, "{name}");
        assert_eq!(partition.log_end_offset(), model.log_end_offset, "{name}");
        let leftovers: Vec<String> = fs::read_dir(before.path())
            .unwrap()
            .map(|item| item.unwrap().file_name().into_string().unwrap())
            .filter(|name| {
                name.contains(".cleaned") || name.contains(".swap") || name.contains(".deleted")
            })
            .collect();
        assert!(leftovers.is_empty(), "{name}: {leftovers:?}");
        drop(partition);
        let (_, report) = open(before.path(), &config);
        assert!(report.is_clean(), "{name}: {report:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Topics

#[test]
fn topics_keep_partitions_in_kafkas_directory_layout() {
    let log_dir = tempfile::tempdir().unwrap();
    let (mut topic, reports) =
        Topic::open(log_dir.path(), "my.topic_1", LogConfig::default()).unwrap();
    assert!(reports.is_empty());
    for partition in [3, 0] {
        let log = topic.partition(partition).unwrap();
        append_rows(log, &[row(NOW, "k", &format!("p{partition}"))], NOW).unwrap();
    }
    topic.flush().unwrap();
    assert!(log_dir.path().join("my.topic_1-0").is_dir());
    assert!(log_dir.path().join("my.topic_1-3").is_dir());
    // Another topic whose name extends this one's is not mistaken for a partition.
    let (mut other, _) = Topic::open(log_dir.path(), "my.topic_1-3", LogConfig::default()).unwrap();
    other.partition(0).unwrap();
    drop((topic, other));
    let (mut topic, reports) =
        Topic::open(log_dir.path(), "my.topic_1", LogConfig::default()).unwrap();
    assert_eq!(topic.partition_ids(), [0, 3]);
    assert!(reports.iter().all(|(_, report)| report.is_clean()));
    let records = topic.partition(3).unwrap().read_records(0, 100).unwrap();
    assert_eq!(records[0].value.as_deref(), Some(b"p3".as_slice()));
    assert_eq!(topic.delete_expired(NOW).unwrap().len(), 2);
    for bad in ["", ".", "..", "a/b", "spaces no", &"x".repeat(250)] {
        assert!(
            Topic::open(log_dir.path(), bad, LogConfig::default()).is_err(),
            "{bad}"
        );
    }
    assert!(topic.partition(-1).is_err());
}

// ---------------------------------------------------------------------------------------------
// Everything interleaved

#[test]
fn random_appends_reopens_truncations_and_compactions_match_a_model() {
    for seed in 1..=8u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(seed * 0x9E37_79B9_7F4A_7C15);
        let config_with = |compression| LogConfig {
            cleanup_policy: CleanupPolicy::Compact,
            segment_bytes: 500,
            index_interval_bytes: 64,
            delete_retention_ms: i64::MAX,
            compression,
            ..LogConfig::default()
        };
        let mut config = config_with(Compression::None);
        let (mut partition, _) = open(dir.path(), &config);
        let mut model = Model::default();
        // What the run exercised, so it cannot pass by doing nothing.
        let (mut most_segments, mut compacted_away, mut truncated_away) = (0, 0, 0);
        for step in 0..300 {
            let op = rng.below(100);
            match op {
                0..=54 => {
                    let rows: Vec<_> = (0..1 + rng.below(6))
                        .map(|_| {
                            let key = format!("k{}", rng.below(10)).into_bytes();
                            let value = {
                                let value_len = rng.below(40) as usize;
                                (rng.below(6) > 0).then(|| rng.bytes(value_len))
                            };
                            (NOW + rng.below(5000) as i64, Some(key), value)
                        })
                        .collect();
                    append_rows(&mut partition, &rows, NOW).unwrap();
                    model.append(&rows);
                }
                55..=62 => partition.flush().unwrap(),
                63..=72 => {
                    drop(partition);
                    config = config_with(ALL_COMPRESSIONS[rng.below(4) as usize]);
                    let (reopened, report) = open(dir.path(), &config);
                    assert!(report.is_clean(), "seed {seed} step {step}: {report:?}");
                    partition = reopened;
                }
                73..=82 => {
                    // Mostly a short tail (an unpublished changelog tail), sometimes anywhere,
                    // including below the log start.
                    let start = partition.log_start_offset();
                    let span = (model.log_end_offset - start + 2) as u64;
                    let anywhere = rng.below(5) == 0;
                    let back = rng.below(if anywhere { span } else { span.min(8) });
                    let target = (model.log_end_offset - back as i64).max(0);
                    let before = model.records.len();
                    partition.truncate_to(target).unwrap();
                    model.truncate_to(target);
                    truncated_away += before - model.records.len();
                }
                83..=89 => partition.roll(NOW).unwrap(),
                _ => {
                    let active_base = partition.segments().last().unwrap().base_offset;
                    let report = partition.compact(NOW).unwrap();
                    model.records = compacted(&model, active_base, NOW, i64::MAX);
                    compacted_away += report.superseded_removed;
                }
            }
            assert_matches_model(&partition, &model, &mut rng);
            most_segments = most_segments.max(partition.segments().len());
        }
        assert!(most_segments > 4 && compacted_away > 20 && truncated_away > 20);
        drop(partition);
        let (partition, report) = open(dir.path(), &config);
        assert!(report.is_clean(), "seed {seed}: {report:?}");
        assert_matches_model(&partition, &model, &mut rng);
    }
}

// ---------------------------------------------------------------------------------------------
// Segment files from elsewhere: a follower's append, and compaction of remote objects

/// A segment file at `path` holding `records` (offset, timestamp, key, value), one entry each
/// or one wrapper with `compression`.
fn segment_object(
    path: &Path,
    compression: Compression,
    records: &[(i64, i64, &str, Option<&str>)],
) {
    let mut builder = MessageSetBuilder::new(Magic::V1, compression);
    for &(offset, timestamp, key, value) in records {
        builder
            .append(
                offset,
                timestamp,
                Some(key.as_bytes()),
                value.map(str::as_bytes),
            )
            .unwrap();
    }
    fs::write(path, builder.build().unwrap()).unwrap();
}

fn stored(offset: i64, timestamp: i64, key: &str, value: Option<&str>) -> Stored {
    Stored {
        offset,
        timestamp,
        key: Some(key.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
    }
}

#[test]
fn fetched_segment_files_keep_their_offsets_and_move_the_log_end() {
    for compression in ALL_COMPRESSIONS {
        let (dir, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let config = small_segments();
        let first = objects.path().join("first.log");
        segment_object(
            &first,
            compression,
            &[(0, 5, "a", Some("1")), (1, 6, "b", None)],
        );
        // Compaction left a gap below 9 and removed the records at 10 and 11.
        let second = objects.path().join("second.log");
        segment_object(
            &second,
            compression,
            &[(4, 7, "c", Some("3")), (9, 8, "a", Some("4"))],
        );

        let (mut partition, _) = open(dir.path(), &config);
        let added = partition.append_fetched(&first, 0, None, NOW).unwrap();
        assert_eq!(added.last_offset, 1);
        let added = partition.append_fetched(&second, 2, Some(11), NOW).unwrap();
        assert_eq!(added.last_offset, 11);
        assert_eq!(partition.log_end_offset(), 12, "{compression:?}");
        partition.flush().unwrap();
        let expected = vec![
            stored(0, 5, "a", Some("1")),
            stored(1, 6, "b", None),
            stored(4, 7, "c", Some("3")),
            stored(9, 8, "a", Some("4")),
        ];
        assert_eq!(read_all(&partition, 1 << 20), expected);
        drop(partition);
        let (mut partition, _) = open(dir.path(), &config);
        assert_eq!(partition.log_end_offset(), 12, "kept across reopening");
        assert_eq!(read_all(&partition, 1 << 20), expected);
        let appended = append_rows(&mut partition, &[row(9, "d", "5")], NOW).unwrap();
        assert_eq!(appended.first_offset, 12);

        // Below the log end, outside the named range, or damaged: refused.
        let below = partition.append_fetched(&first, 0, None, NOW);
        assert!(matches!(below, Err(Error::InvalidArgument(_))), "{below:?}");
        let beyond = objects.path().join("beyond.log");
        segment_object(
            &beyond,
            compression,
            &[(20, 1, "e", Some("6")), (25, 1, "f", Some("7"))],
        );
        let outside = partition.append_fetched(&beyond, 20, Some(24), NOW);
        assert!(matches!(outside, Err(Error::Corrupted(_))), "{outside:?}");
        partition.truncate_to(13).unwrap();
        let mut damaged = fs::read(&beyond).unwrap();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        fs::write(&beyond, damaged).unwrap();
        let crc = partition.append_fetched(&beyond, 20, None, NOW);
        assert!(
            matches!(crc, Err(Error::Corrupted(ref m)) if m.contains("CRC")),
            "{crc:?}"
        );
    }
}

#[test]
fn compacted_objects_keep_each_keys_latest_record_and_cover_their_inputs_exactly() {
    let objects = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let path = |name: &str| objects.path().join(name);
    // Tombstones at time 1 are old at NOW; the one at NOW - 10 is not.
    segment_object(
        &path("0"),
        Compression::None,
        &[
            (0, 1, "a", Some("1")),
            (1, 1, "b", Some("2")),
            (2, 1, "c", Some("3")),
        ],
    );
    segment_object(
        &path("3"),
        Compression::Gzip,
        &[
            (3, 1, "a", Some("4")),
            (4, 1, "b", None),
            (5, NOW - 10, "d", None),
            (6, 1, "e", Some("5")),
        ],
    );
    segment_object(&path("8"), Compression::None, &[(8, 1, "c", Some("6"))]);
    let object = |first: i64, last: Option<i64>, name: &str| SegmentObject {
        first,
        last,
        path: path(name),
    };
    let inputs = [object(0, Some(2), "0"), object(3, Some(7), "3")];
    let newer = [object(8, None, "8")];
    let config = LogConfig {
        delete_retention_ms: 1000,
        ..LogConfig::default()
    };
    let read = |object: &CompactedObject| -> Vec<Stored> {
        decode_records(&fs::read(&object.path).unwrap())
            .unwrap()
            .into_iter()
            .map(Stored::from)
            .collect()
    };

    let mut seen = Vec::new();
    let (outputs, report) = compact_objects(
        &inputs,
        &newer,
        &config,
        NOW,
        out.path(),
        &mut |done, total| seen.push((done, total)),
    )
    .unwrap();
    assert_eq!(outputs.len(), 1);
    assert_eq!((outputs[0].first, outputs[0].last), (0, 7));
    assert_eq!(
        outputs[0].path.file_name().unwrap(),
        format!("{}-{}.log", filename_prefix(0), filename_prefix(7)).as_str()
    );
    // "a" at 3, "d"'s young tombstone, "e"; "c" is superseded by the newer object.
    assert_eq!(
        read(&outputs[0]),
        vec![
            stored(3, 1, "a", Some("4")),
            stored(5, NOW - 10, "d", None),
            stored(6, 1, "e", Some("5"))
        ]
    );
    assert_eq!(report.distinct_keys, 5);
    assert_eq!(report.records_read, 7);
    assert_eq!(
        (report.superseded_removed, report.tombstones_removed),
        (3, 1)
    );
    assert_eq!(outputs[0].bytes, report.bytes_after);
    let (done, total) = *seen.last().unwrap();
    assert_eq!(done, total);

    // Groups of one object each when segment.bytes is small: the first group keeps no record
    // and is still written, so the outputs cover offsets 0..=7 without a gap.
    let small = LogConfig {
        segment_bytes: 14,
        ..config.clone()
    };
    let (outputs, _) =
        compact_objects(&inputs, &newer, &small, NOW, out.path(), &mut |_, _| {}).unwrap();
    let ranges: Vec<(i64, i64, u64)> = outputs.iter().map(|o| (o.first, o.last, o.bytes)).collect();
    assert_eq!(ranges[0], (0, 2, 0));
    assert_eq!((ranges[1].0, ranges[1].1), (3, 7));

    // Inputs must follow one another and hold what their range says.
    let gap = [object(0, Some(2), "0"), object(4, Some(7), "3")];
    let result = compact_objects(&gap, &[], &config, NOW, out.path(), &mut |_, _| {});
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{result:?}"
    );
    let short = [object(0, Some(1), "0")];
    let result = compact_objects(&short, &[], &config, NOW, out.path(), &mut |_, _| {});
    assert!(matches!(result, Err(Error::Corrupted(_))), "{result:?}");
}

#[test]
fn records_synced_without_their_indexes_survive_a_crash_and_the_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 150,
        ..LogConfig::default()
    };
    let mut model = build_log(dir.path(), &config, 50);
    let (mut partition, _) = open(dir.path(), &config);
    let rows: Vec<Row> = (0..50)
        .map(|i| row(NOW + i, &format!("k{i}"), "synced"))
        .collect();
    append_rows(&mut partition, &rows, NOW).unwrap();
    model.append(&rows);
    partition.sync_appended().unwrap();
    drop(partition); // a kill: no close
                     // The index files as a machine crash may leave them: their unsynced entries lost.
    for extension in ["index", "timeindex"] {
        fs::write(segment_file(dir.path(), 0, extension), b"").unwrap();
    }
    let (partition, report) = open(dir.path(), &config);
    assert!(
        !report.reopened_clean && report.truncated_tail.is_none(),
        "{report:?}"
    );
    for extension in ["index", "timeindex"] {
        let rebuilt = fs::metadata(segment_file(dir.path(), 0, extension)).unwrap();
        assert!(rebuilt.len() > 0, "{extension} rewritten by the scan");
    }
    assert_matches_model(&partition, &model, &mut Rng(10));
}
