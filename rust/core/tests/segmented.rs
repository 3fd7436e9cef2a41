//! Window and session stores end to end on real RocksDB segments, without Python.

use std::fs;
use std::path::Path;

use kstate_core::format::key_schema::window;
use kstate_core::format::timestamped::encode;
use kstate_core::log::{LogConfig, Partition};
use kstate_core::logged::changelog::Changelog;
use kstate_core::logged::logged_store::{LoggedStore, StoreChangelog};
use kstate_core::segmented::commit_intent;
use kstate_core::segmented::segmented_store::{
    scan, scan_visit, ScanCursor, SegmentQuery, SegmentReader, SegmentedKeys, SegmentedOpenReport,
};
use kstate_core::store::key_range::Direction;
use kstate_core::store::merge::{ScanLimit, CHUNK_BYTES};
use kstate_core::{
    SegmentedOptions, SegmentedStore, SessionStore, StoreOptions, Ttl, TtlClock, ValueFormat,
    WindowStore,
};

mod common;
use common::copy_dir;

const MINUTE: i64 = 60_000;

fn options(retention_ms: i64, format: ValueFormat, ttl: Option<Ttl>) -> SegmentedOptions {
    SegmentedOptions {
        retention_ms,
        segment_interval: kstate_core::segmented::segments::segment_interval(retention_ms),
        format,
        store: StoreOptions {
            transactional: true,
            max_uncommitted_bytes: 1 << 20,
            offset_key: "app-w-changelog-0".into(),
            cache_max_bytes: 1 << 20,
            rocks: None,
            durability: Default::default(),
        },
        ttl,
        bloom_filters: true,
    }
}

fn open_window(dir: &Path, retention_ms: i64, size: i64, dups: bool) -> WindowStore {
    let (segments, _) = SegmentedStore::open_rocksdb(
        "w",
        &dir.join("w"),
        options(retention_ms, ValueFormat::Plain, None),
        &mut |_| {},
    )
    .unwrap();
    WindowStore::new(segments, size, dups).unwrap()
}

/// Opens store `name` of `task` (retention 10 minutes: 5-minute segments).
fn open_segments(task: &Path, name: &str) -> (SegmentedStore, SegmentedOpenReport) {
    SegmentedStore::open_rocksdb(
        name,
        &task.join(name),
        options(10 * MINUTE, ValueFormat::Plain, None),
        &mut |_| {},
    )
    .unwrap()
}

fn rows(reader: &dyn SegmentReader, query: &SegmentQuery) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut cursor = ScanCursor::default();
    let mut out = Vec::new();
    // Small chunks exercise the continuation across segments.
    loop {
        let chunk = scan(reader, query, &mut cursor, 2).unwrap();
        let short = chunk.len() < 2;
        out.extend(chunk);
        if short {
            return out;
        }
    }
}

fn window_rows(store: &WindowStore, query: &SegmentQuery) -> Vec<(String, i64, String)> {
    rows(store.segments(), query)
        .into_iter()
        .map(|(k, v)| {
            let (key, start, _) = store.queries().decode(&k).unwrap();
            (
                String::from_utf8(key.to_vec()).unwrap(),
                start,
                String::from_utf8(v).unwrap(),
            )
        })
        .collect()
}

#[test]
fn chunks_of_large_windows_stop_at_their_bytes_across_segments_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    // 40 keys x 4 windows in two 5-minute segments, values up to 2.5x a chunk's bytes; half
    // committed, half staged.
    for (n, start) in [0, 3 * MINUTE, 6 * MINUTE, 9 * MINUTE]
        .into_iter()
        .enumerate()
    {
        for i in 0..40usize {
            let value = vec![i as u8; (i * n * 104_729) % (5 * CHUNK_BYTES / 2)];
            store
                .put(format!("k{i:02}").as_bytes(), Some(&value), start)
                .unwrap();
        }
        if n < 2 {
            store
                .segments_mut()
                .commit(Some(n as i64), &mut |_| {})
                .unwrap();
        }
    }
    let t = store.segments().stream_time();
    // fetch_all of two of the four times: the time filter rejects half of each segment's rows.
    for direction in [Direction::Forward, Direction::Reverse] {
        let query = store
            .queries()
            .range(t, None, None, 3 * MINUTE, 6 * MINUTE, direction);
        let expected = scan(
            store.segments(),
            &query,
            &mut ScanCursor::default(),
            usize::MAX,
        )
        .unwrap();
        assert_eq!(expected.len(), 80);
        let mut cursor = ScanCursor::default();
        let mut seen = Vec::new();
        while !cursor.is_done() {
            let mut chunk = Vec::new();
            let scanned = scan_visit(
                store.segments(),
                &query,
                &mut cursor,
                ScanLimit::chunk(2048),
                &mut |k, v| {
                    chunk.push((k.to_vec(), v.to_vec()));
                    Ok(())
                },
            )
            .unwrap();
            common::assert_chunk(&chunk, scanned);
            assert_eq!(scanned.at_limit, !cursor.is_done());
            seen.extend(chunk);
        }
        assert!(
            seen == expected,
            "{direction:?}: chunked rows differ from the whole scan"
        );
    }
}

#[test]
fn window_fetches_are_inclusive_ordered_and_segmented() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    for (key, start, value) in [
        ("a", 0, "a0"),
        ("a", MINUTE, "a1"),
        ("b", MINUTE, "b1"),
        ("a", 6 * MINUTE, "a6"),
        ("ab", MINUTE, "ab1"),
    ] {
        assert!(store
            .put(key.as_bytes(), Some(value.as_bytes()), start)
            .unwrap());
    }
    assert_eq!(
        store.segments().segment_ids(),
        vec![0, 1],
        "5-minute segments"
    );
    assert_eq!(store.fetch(b"a", MINUTE).unwrap(), Some(b"a1".to_vec()));
    let t = store.segments().stream_time();
    let q = store
        .queries()
        .key(t, b"a", 0, 6 * MINUTE, Direction::Forward);
    let got: Vec<_> = window_rows(&store, &q).into_iter().map(|r| r.2).collect();
    assert_eq!(got, vec!["a0", "a1", "a6"]);
    let q = store
        .queries()
        .key(t, b"a", 0, 6 * MINUTE, Direction::Reverse);
    let got: Vec<_> = window_rows(&store, &q).into_iter().map(|r| r.2).collect();
    assert_eq!(got, vec!["a6", "a1", "a0"]);
    let q = store.queries().range(
        t,
        Some(b"a"),
        Some(b"ab"),
        MINUTE,
        MINUTE,
        Direction::Forward,
    );
    let got: Vec<_> = window_rows(&store, &q).into_iter().map(|r| r.2).collect();
    assert_eq!(got, vec!["a1", "ab1"], "key bounds inclusive, b excluded");
    let q = store
        .queries()
        .range(t, None, None, 0, i64::MAX, Direction::Forward);
    assert_eq!(window_rows(&store, &q).len(), 5);
    assert_eq!(
        store.queries().decode(&q_key(b"a", MINUTE)).unwrap(),
        (&b"a"[..], MINUTE, 2 * MINUTE)
    );
}

fn q_key(key: &[u8], start: i64) -> Vec<u8> {
    kstate_core::format::key_schema::window::to_store_key(key, start, 0)
}

#[test]
fn retention_drops_late_puts_and_hides_expired_windows() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 2 * MINUTE, MINUTE, false);
    // Segment interval is 60 s (the minimum), retention 2 minutes.
    store.put(b"k", Some(b"old"), 0).unwrap();
    store.put(b"k", Some(b"new"), 10 * MINUTE).unwrap();
    assert!(!store.put(b"k", Some(b"late"), 7 * MINUTE).unwrap());
    assert_eq!(store.segments().dropped_records(), 1);
    assert_eq!(store.fetch(b"k", 0).unwrap(), None, "expired at once");
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    assert_eq!(
        store.segments().segment_ids(),
        vec![10],
        "expired segment deleted on commit"
    );
    assert!(!dir.path().join("w/w.0").exists());
    assert!(dir.path().join("w/w.600000").exists());
    store.segments_mut().close().unwrap();
    let mut store = open_window(dir.path(), 2 * MINUTE, MINUTE, false);
    assert_eq!(
        store.segments().stream_time(),
        10 * MINUTE,
        "stream time is committed"
    );
    assert!(!store.put(b"k", Some(b"late"), 7 * MINUTE).unwrap());
    assert_eq!(
        store.fetch(b"k", 10 * MINUTE).unwrap(),
        Some(b"new".to_vec())
    );
}

#[test]
fn put_all_follows_puts_one_by_one_across_segments_and_retention() {
    // The same writes through `put` one at a time and through `put_all`, with and without
    // duplicates: runs of one segment, a segment left and come back to, a put made late by an
    // earlier one of the same call, deletes, and a spill past the uncommitted bound.
    for dups in [false, true] {
        let value = vec![b'v'; 400];
        let mut writes = Vec::new();
        for i in 0..3000u32 {
            let start = match i % 1000 {
                0..=399 => 0,
                400..=699 => MINUTE,
                _ => 0,
            } + i64::from(i / 1000) * 3 * MINUTE;
            let v = (i % 7 != 3).then_some(&value[..]);
            writes.push((format!("k{:04}", i % 1200).into_bytes(), v, start));
        }
        writes.push((b"late".to_vec(), Some(b"x"), 0)); // stream time is 7 minutes by now
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let mut one_by_one = open_window(dirs[0].path(), 2 * MINUTE, MINUTE, dups);
        let mut batched = open_window(dirs[1].path(), 2 * MINUTE, MINUTE, dups);
        let mut dropped = 0;
        for (key, value, start) in &writes {
            dropped += usize::from(!one_by_one.put(key, *value, *start).unwrap());
        }
        let all: Vec<_> = writes.iter().map(|(k, v, s)| (&k[..], *v, *s)).collect();
        assert_eq!(batched.put_all(&all).unwrap(), dropped);
        assert!(dropped >= 1, "the late put is dropped");
        for store in [&mut one_by_one, &mut batched] {
            store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
        }
        let t = batched.segments().stream_time();
        assert_eq!(t, one_by_one.segments().stream_time());
        assert_eq!(
            batched.segments().dropped_records(),
            one_by_one.segments().dropped_records()
        );
        let q = batched
            .queries()
            .range(t, None, None, 0, t, Direction::Forward);
        let expected = window_rows(&one_by_one, &q);
        assert!(!expected.is_empty());
        assert_eq!(window_rows(&batched, &q), expected, "dups: {dups}");
    }
}

#[test]
fn duplicates_get_sequence_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, true);
    store.put(b"k", Some(b"1"), 0).unwrap();
    store.put(b"k", Some(b"2"), 0).unwrap();
    store.put(b"k", None, 0).unwrap();
    let t = store.segments().stream_time();
    let q = store.queries().key(t, b"k", 0, 0, Direction::Forward);
    let got = rows(store.segments(), &q);
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[1].0,
        kstate_core::format::key_schema::window::to_store_key(b"k", 0, 2)
    );
    assert_eq!(store.fetch(b"k", 0).unwrap(), Some(b"1".to_vec()));
}

#[test]
fn sessions_are_found_by_end_and_start() {
    let dir = tempfile::tempdir().unwrap();
    let (segments, _) = open_segments(dir.path(), "s");
    let mut store = SessionStore::new(segments);
    store.put(b"k", 0, 10, Some(b"s1")).unwrap();
    store.put(b"k", 100, 200, Some(b"s2")).unwrap();
    store
        .put(b"k", 6 * MINUTE, 7 * MINUTE, Some(b"s3"))
        .unwrap();
    store.put(b"j", 100, 150, Some(b"j1")).unwrap();
    let t = store.segments().stream_time();
    let find = |from: Option<&[u8]>, to: Option<&[u8]>, end: i64, start: i64, d| {
        let q = store.queries().find(t, from, to, end, start, d);
        rows(store.segments(), &q)
            .into_iter()
            .map(|(_, v)| String::from_utf8(v).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        find(Some(b"k"), Some(b"k"), 10, 100, Direction::Forward),
        vec!["s1", "s2"]
    );
    assert_eq!(
        find(Some(b"k"), Some(b"k"), 11, i64::MAX, Direction::Reverse),
        vec!["s3", "s2"]
    );
    assert_eq!(
        find(None, None, 0, i64::MAX, Direction::Forward),
        vec!["j1", "s1", "s2", "s3"],
        "segment by segment, key bytes within"
    );
    assert_eq!(
        store.fetch_session(b"k", 100, 200).unwrap(),
        Some(b"s2".to_vec())
    );
    store.put(b"k", 100, 200, None).unwrap();
    assert_eq!(store.fetch_session(b"k", 100, 200).unwrap(), None);
    assert!(store.put(b"k", 5, 4, Some(b"x")).is_err());
}

#[test]
fn a_commit_interrupted_between_segments_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    for start in [0, 5 * MINUTE, 9 * MINUTE] {
        store.put(b"k", Some(b"v1"), start).unwrap();
    }
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    for start in [0, 5 * MINUTE, 9 * MINUTE] {
        store.put(b"k", Some(b"v2"), start).unwrap();
    }
    // Copying the task directory (segments and the commit file) after the first segment's batch
    // is applied is what a crash there leaves behind (RocksDB's WAL is in the page cache, as after a killed process).
    let snapshot = tempfile::tempdir().unwrap();
    let mut copied = false;
    store
        .segments_mut()
        .commit(Some(2), &mut |p| {
            if p.writes_applied == 1 && !copied {
                copy_dir(dir.path(), snapshot.path());
                copied = true;
            }
        })
        .unwrap();
    assert!(copied);
    let (segments, report) = open_segments(snapshot.path(), "w");
    assert_eq!(report.finished_commit, Some(2));
    let mut reopened = WindowStore::new(segments, MINUTE, false).unwrap();
    assert_eq!(reopened.segments().committed_offset().unwrap(), Some(2));
    for start in [0, 5 * MINUTE, 9 * MINUTE] {
        assert_eq!(reopened.fetch(b"k", start).unwrap(), Some(b"v2".to_vec()));
    }
}

#[test]
fn a_commit_writing_one_segment_skips_the_intent_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let intent = dir.path().join(".w.commit");
    let intent_offset = || commit_intent::read(&intent).unwrap().unwrap().offset;
    let reopen = || {
        let (segments, report) = open_segments(dir.path(), "w");
        assert_eq!(report.finished_commit, None);
        WindowStore::new(segments, MINUTE, false).unwrap()
    };
    // Retention 10 minutes: 5-minute segments 0, 1 and 2.
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    for start in [2 * MINUTE, 5 * MINUTE, 10 * MINUTE] {
        store.put(b"k", Some(b"v1"), start).unwrap();
    }
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    assert_eq!(intent_offset(), Some(1));
    store.put(b"k", Some(b"v2"), 10 * MINUTE).unwrap();
    store.put(b"k", Some(b"v2"), 11 * MINUTE).unwrap();
    store.segments_mut().commit(Some(2), &mut |_| {}).unwrap();
    assert_eq!(intent_offset(), Some(1), "segment 2 alone took the commit");
    // Nothing staged: the offset goes into the newest segment.
    store.segments_mut().commit(Some(3), &mut |_| {}).unwrap();
    assert_eq!(intent_offset(), Some(1));
    store.segments_mut().close().unwrap();

    let mut store = reopen();
    assert_eq!(store.segments().committed_offset().unwrap(), Some(3));
    assert_eq!(store.segments().stream_time(), 11 * MINUTE);
    for (start, value) in [
        (2 * MINUTE, b"v1"),
        (5 * MINUTE, b"v1"),
        (10 * MINUTE, b"v2"),
        (11 * MINUTE, b"v2"),
    ] {
        assert_eq!(
            store.fetch(b"k", start).unwrap().as_deref(),
            Some(&value[..])
        );
    }
    // A commit that expires a segment goes through the intent (stream time 16 minutes: segment 0
    // is gone), and so does one whose offset goes back.
    store.put(b"k", Some(b"v3"), 16 * MINUTE).unwrap();
    store.segments_mut().commit(Some(4), &mut |_| {}).unwrap();
    assert_eq!(intent_offset(), Some(4));
    assert_eq!(store.segments().segment_ids(), vec![1, 2, 3]);
    store.put(b"k", Some(b"v4"), 16 * MINUTE).unwrap();
    store.segments_mut().commit(Some(5), &mut |_| {}).unwrap();
    assert_eq!(intent_offset(), Some(4));
    store.segments_mut().commit(Some(2), &mut |_| {}).unwrap();
    assert_eq!(intent_offset(), Some(2));
    store.segments_mut().close().unwrap();
    let mut store = reopen();
    assert_eq!(store.segments().committed_offset().unwrap(), Some(2));
    assert_eq!(store.segments().stream_time(), 16 * MINUTE);
    assert_eq!(
        store.fetch(b"k", 16 * MINUTE).unwrap().as_deref(),
        Some(&b"v4"[..])
    );
}

#[test]
fn commits_without_offset_skip_the_intent_until_one_follows_an_offset() {
    let dir = tempfile::tempdir().unwrap();
    let intent = dir.path().join(".w.commit");
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    store.put(b"k", Some(b"v1"), 2 * MINUTE).unwrap();
    store.segments_mut().commit(None, &mut |_| {}).unwrap();
    assert!(!intent.exists(), "no offset before, none now: one segment");
    store.put(b"k", Some(b"v2"), 2 * MINUTE).unwrap();
    store.segments_mut().commit(Some(7), &mut |_| {}).unwrap();
    assert!(!intent.exists());
    // Going from an offset back to none must reach every segment: through the intent.
    store.put(b"k", Some(b"v3"), 2 * MINUTE).unwrap();
    store.segments_mut().commit(None, &mut |_| {}).unwrap();
    let record = commit_intent::read(&intent).unwrap().unwrap();
    assert_eq!((record.offset, record.entries), (None, 0));
    store.segments_mut().close().unwrap();
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    assert_eq!(store.segments().committed_offset().unwrap(), None);
    assert_eq!(
        store.fetch(b"k", 2 * MINUTE).unwrap().as_deref(),
        Some(&b"v3"[..])
    );
}

#[test]
fn a_one_segment_commit_before_any_intent_is_found_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 10 * MINUTE, MINUTE, false);
    store.put(b"k", Some(b"v"), 7 * MINUTE).unwrap();
    store.segments_mut().commit(Some(8), &mut |_| {}).unwrap();
    assert!(!dir.path().join(".w.commit").exists());
    // What a killed process leaves: RocksDB's WAL in the page cache, no clean close.
    let snapshot = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), snapshot.path());
    let mut store = open_window(snapshot.path(), 10 * MINUTE, MINUTE, false);
    assert_eq!(store.segments().committed_offset().unwrap(), Some(8));
    assert_eq!(store.segments().stream_time(), 7 * MINUTE);
    assert_eq!(
        store.fetch(b"k", 7 * MINUTE).unwrap().as_deref(),
        Some(&b"v"[..])
    );
}

#[test]
fn recover_discards_staged_writes_and_stream_time_and_views_read_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_window(dir.path(), 2 * MINUTE, MINUTE, false);
    store.put(b"k", Some(b"v"), 0).unwrap();
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    let view = store.segments().read_committed_view();
    store.put(b"k", Some(b"far"), 100 * MINUTE).unwrap();
    assert_eq!(store.fetch(b"k", 0).unwrap(), None);
    assert_eq!(view.get(&q_key(b"k", 0), 0).unwrap(), Some(b"v".to_vec()));
    assert!(store.segments_mut().recover(Some(1)).unwrap());
    assert_eq!(store.fetch(b"k", 0).unwrap(), Some(b"v".to_vec()));
    store.segments_mut().close().unwrap();
    assert!(view.get(&q_key(b"k", 0), 0).is_err());
}

#[test]
fn spilled_segments_commit_through_the_intent() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(10 * MINUTE, ValueFormat::Plain, None);
    opts.store.max_uncommitted_bytes = 4096;
    let (segments, _) =
        SegmentedStore::open_rocksdb("w", &dir.path().join("w"), opts.clone(), &mut |_| {})
            .unwrap();
    let mut store = WindowStore::new(segments, MINUTE, false).unwrap();
    for i in 0..2000i64 {
        store
            .put(
                format!("k{i:05}").as_bytes(),
                Some(&[7; 50]),
                (i % 10) * MINUTE,
            )
            .unwrap();
    }
    assert!(store.segments().uncommitted().1, "spilled");
    // Kafka's openExisting gives up on a store directory holding anything but segments.
    for entry in std::fs::read_dir(dir.path().join("w")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let parsed = kstate_core::segmented::segments::parse_segment_dir("w", &name);
        assert!(parsed.is_some(), "{name} in the store directory");
    }
    assert!(dir.path().join(".w.300000.uncommitted").is_dir());
    assert_eq!(
        store.fetch(b"k00003", 3 * MINUTE).unwrap(),
        Some(vec![7; 50])
    );
    store.segments_mut().commit(Some(9), &mut |_| {}).unwrap();
    assert_eq!(store.segments().uncommitted(), (0, false));
    store.segments_mut().close().unwrap();
    let (segments, _) =
        SegmentedStore::open_rocksdb("w", &dir.path().join("w"), opts, &mut |_| {}).unwrap();
    let store = WindowStore::new(segments, MINUTE, false).unwrap();
    let q = store.queries().range(
        store.segments().stream_time(),
        None,
        None,
        0,
        i64::MAX,
        Direction::Forward,
    );
    assert_eq!(rows(store.segments(), &q).len(), 2000);
}

/// A closed store of 5-minute segments holding window `k` at 5 minutes: segment `w.300000`.
fn write_one_window(dir: &Path) {
    let mut store = open_window(dir, 10 * MINUTE, MINUTE, false);
    store.put(b"k", Some(b"v"), 5 * MINUTE).unwrap();
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    store.segments_mut().close().unwrap();
}

#[test]
fn legacy_segment_names_are_renamed() {
    let dir = tempfile::tempdir().unwrap();
    write_one_window(dir.path());
    std::fs::rename(dir.path().join("w/w.300000"), dir.path().join("w/w:300000")).unwrap();
    let (segments, report) = open_segments(dir.path(), "w");
    assert_eq!(report.renamed_legacy, 1);
    assert!(dir.path().join("w/w.300000").exists());
    let mut store = WindowStore::new(segments, MINUTE, false).unwrap();
    assert_eq!(store.fetch(b"k", 5 * MINUTE).unwrap(), Some(b"v".to_vec()));
}

fn segment_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn open_error(dir: &Path, retention_ms: i64) -> kstate_core::Error {
    match SegmentedStore::open_rocksdb(
        "w",
        dir,
        options(retention_ms, ValueFormat::Plain, None),
        &mut |_| {},
    ) {
        Ok(_) => panic!("opened"),
        Err(error) => error,
    }
}

#[test]
fn a_store_reopened_with_another_retention_is_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    // 60 minutes of retention: 30-minute segments w.1800000 and w.3600000.
    let mut store = open_window(dir.path(), 60 * MINUTE, MINUTE, false);
    for minute in [30, 40, 70] {
        assert!(store.put(b"k", Some(b"v"), minute * MINUTE).unwrap());
    }
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    store.segments_mut().close().unwrap();
    let written = segment_dirs(&dir.path().join("w"));
    assert_eq!(written, ["w.1800000", "w.3600000"]);
    // 180 minutes: 90-minute segments, none of which starts at 30 minutes.
    let error = open_error(&dir.path().join("w"), 180 * MINUTE);
    assert!(
        matches!(&error, kstate_core::Error::InvalidState(m) if m.contains("w.1800000") && m.contains("retention")),
        "{error:?}"
    );
    assert_eq!(
        segment_dirs(&dir.path().join("w")),
        written,
        "nothing renamed"
    );
    // 20 minutes: 10-minute segments, whose starts the old names are too; the interval each
    // segment was created with tells.
    let error = open_error(&dir.path().join("w"), 20 * MINUTE);
    assert!(
        matches!(&error, kstate_core::Error::InvalidState(m) if m.contains("created with a segment interval of 1800000 ms")),
        "{error:?}"
    );
    let store = open_window(dir.path(), 60 * MINUTE, MINUTE, false);
    assert_eq!(store.segments().segment_ids(), vec![1, 2]);
    for minute in [30, 40, 70] {
        assert_eq!(
            fetched(&store, minute),
            vec![b"v".to_vec()],
            "minute {minute}"
        );
    }
}

/// The values of `k`'s window starting at `minute`.
fn fetched(store: &WindowStore, minute: i64) -> Vec<Vec<u8>> {
    let t = store.segments().stream_time();
    let q = store.queries().key(
        t,
        b"k",
        minute * MINUTE,
        minute * MINUTE,
        Direction::Forward,
    );
    rows(store.segments(), &q)
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn two_directories_of_one_segment_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_one_window(dir.path());
    common::copy_dir(
        &dir.path().join("w/w.300000"),
        &dir.path().join("w/w:300000"),
    );
    let error = open_error(&dir.path().join("w"), 10 * MINUTE);
    assert!(
        matches!(&error, kstate_core::Error::InvalidState(m) if m.contains("w:300000")),
        "{error:?}"
    );
}

#[test]
fn ttl_hides_expired_values_and_compaction_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let ttl = Ttl::new(1_000, TtlClock::StreamTime).unwrap();
    let (segments, _) = SegmentedStore::open_rocksdb(
        "w",
        &dir.path().join("w"),
        options(10 * MINUTE, ValueFormat::Timestamped, Some(ttl)),
        &mut |_| {},
    )
    .unwrap();
    let mut store = WindowStore::new(segments, MINUTE, false).unwrap();
    store.put(b"old", Some(&encode(100, b"o")), 0).unwrap();
    store.put(b"new", Some(&encode(2_000, b"n")), 0).unwrap();
    assert_eq!(store.fetch(b"old", 0).unwrap(), None);
    assert_eq!(store.fetch(b"new", 0).unwrap(), Some(encode(2_000, b"n")));
    store.segments_mut().commit(Some(1), &mut |_| {}).unwrap();
    store.segments().compact().unwrap();
    store.segments_mut().close().unwrap();
    let db = rocksdb::DB::open_cf_for_read_only(
        &rocksdb::Options::default(),
        dir.path().join("w/w.0"),
        ["default", "keyValueWithTimestamp", "offsets"],
        false,
    )
    .unwrap();
    let cf = db.cf_handle("keyValueWithTimestamp").unwrap();
    let keys: Vec<Vec<u8>> = db
        .iterator_cf(cf, rocksdb::IteratorMode::Start)
        .map(|kv| kv.unwrap().0.to_vec())
        .collect();
    assert_eq!(keys, vec![q_key(b"new", 0)]);
}

fn open_logged_window(task: &Path, log_dir: &Path) -> (LoggedStore<WindowStore>, u64) {
    let (changelog, _) =
        Changelog::open(&log_dir.join("app-w-changelog-0"), LogConfig::default()).unwrap();
    let changelog = StoreChangelog {
        changelog,
        checkpoint: None,
        topic: "app-w-changelog".into(),
        partition: 0,
        timestamped: false,
    };
    LoggedStore::logged(
        open_window(task, 600_000, 60_000, false),
        changelog,
        &mut |_, _| {},
    )
    .unwrap()
}

#[test]
fn a_logged_window_store_publishes_store_keys_and_restores_into_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (task, log_dir) = (dir.path().join("task"), dir.path().join("log"));
    let (mut store, restored) = open_logged_window(&task, &log_dir);
    assert_eq!(restored, 0);
    // Windows in three segments (interval 300 s); the last put expires the first segment.
    for (key, start) in [(b"a", 0), (b"b", 300_000), (b"a", 700_000), (b"c", 900_001)] {
        store.store.put(key, Some(b"v"), start).unwrap();
    }
    let published = store.commit(None, 1, &mut |_| {}, &mut |_| {}).unwrap();
    assert_eq!(
        published,
        Some(2),
        "the expired window's write is not published"
    );
    let expected = store.store.segments().segment_ids();
    store.close().unwrap();
    let (log, _) =
        Partition::open(log_dir.join("app-w-changelog-0"), LogConfig::default()).unwrap();
    let records = log.read_records(0, usize::MAX).unwrap();
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(
        keys,
        [
            window::to_store_key(b"b", 300_000, 0),
            window::to_store_key(b"a", 700_000, 0),
            window::to_store_key(b"c", 900_001, 0),
        ]
    );
    assert_eq!(
        records[0].timestamp, 300_000,
        "a plain window's record time is its start"
    );
    drop(log);

    fs::remove_dir_all(&task).unwrap();
    let (mut store, restored) = open_logged_window(&task, &log_dir);
    assert_eq!(restored, 3);
    assert_eq!(store.store.segments().segment_ids(), expected);
    assert_eq!(
        store.store.fetch(b"a", 700_000).unwrap(),
        Some(b"v".to_vec())
    );
    assert_eq!(store.store.segments().committed_offset().unwrap(), Some(2));
}
