//! Snapshots of a committed store end to end on real RocksDB, without Python: a capture while
//! a writer commits holds exactly the commit of the offset it names, a later snapshot shares the
//! unchanged table files, and the files placed in an empty directory open as the store at that
//! offset. Key-value stores, and segmented (window, session) stores, whose every live segment
//! is captured at one offset with the stream time.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kstate_core::segmented::segmented_store::{scan, ScanCursor, SegmentQuery, SegmentReader};
use kstate_core::segmented::segments::segment_interval;
use kstate_core::segmented::snapshot::{self as segmented_snapshot, SegmentedCapture};
use kstate_core::snapshot::files::{verify, FileHashes};
use kstate_core::snapshot::manifest::{SnapshotManifest, StoreKind};
use kstate_core::store::Durability;
use kstate_core::{
    Direction, Error, KeyRange, KeyValueStore, SegmentedOptions, SegmentedStore, StoreOptions,
    ValueFormat,
};

const OFFSET_KEY: &str = "app-s-changelog-0";
const KEYS: u32 = 2_000;

fn options(max_uncommitted_bytes: usize, durability: Durability) -> StoreOptions {
    StoreOptions {
        transactional: true,
        max_uncommitted_bytes,
        offset_key: OFFSET_KEY.into(),
        cache_max_bytes: 1 << 20,
        rocks: None,
        durability,
    }
}

fn open(dir: &Path, max_uncommitted_bytes: usize, durability: Durability) -> KeyValueStore {
    KeyValueStore::open_rocksdb(
        "s",
        &dir.join("store"),
        &dir.join(".s.uncommitted"),
        ValueFormat::Plain,
        options(max_uncommitted_bytes, durability),
        &mut |_| {},
    )
    .expect("open")
    .0
}

/// Commit `n` writes every key's value as `n` at offset `n`.
fn commit_round(store: &mut KeyValueStore, n: i64) {
    let value = n.to_be_bytes();
    for k in 0..KEYS {
        store
            .put(format!("key-{k:06}").as_bytes(), Some(&value))
            .unwrap();
    }
    store.commit(Some(n), &mut |_| {}).unwrap();
}

/// Every value the store holds, as the set of distinct rounds.
fn rounds(store: &KeyValueStore) -> BTreeSet<i64> {
    let rows = store
        .scan(&KeyRange::all(), Direction::Forward, usize::MAX)
        .unwrap();
    assert_eq!(rows.len(), KEYS as usize);
    rows.iter()
        .map(|(_, v)| i64::from_be_bytes(v.as_slice().try_into().unwrap()))
        .collect()
}

/// Copies a snapshot's files, as its manifest lists them, into `to`.
fn place(from: &Path, manifest: &SnapshotManifest, to: &Path) {
    for file in &manifest.files {
        let target = to.join(&file.path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&file.path), target).unwrap();
    }
}

/// The manifest of the key-value store's files captured `at`, at `offset`.
fn manifest_of(at: &Path, offset: i64, hashes: &mut FileHashes) -> SnapshotManifest {
    let (files, _) = hashes.describe(at).unwrap();
    SnapshotManifest {
        offset,
        batch_id: None,
        kind: StoreKind::KeyValue,
        created_ms: 0,
        stream_time: None,
        files,
    }
}

fn capture(store: &KeyValueStore, at: &Path, hashes: &mut FileHashes) -> SnapshotManifest {
    let offset = store
        .committed_files()
        .unwrap()
        .capture(at)
        .unwrap()
        .unwrap();
    let manifest = manifest_of(at, offset, hashes);
    SnapshotManifest::decode(&manifest.encode().unwrap()).unwrap()
}

#[test]
fn a_snapshot_opens_as_the_store_at_its_offset_and_the_next_copies_only_new_files() {
    for durability in [Durability::Wal, Durability::Changelog] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), 64 << 20, durability);
        let mut hashes = FileHashes::default();
        for n in 0..3 {
            commit_round(&mut store, n);
        }
        let first = capture(&store, &dir.path().join("snap-1"), &mut hashes);
        assert_eq!(first.offset, 2);
        assert!(first.files.iter().any(|f| f.path.ends_with(".sst")));
        assert!(first.files.iter().any(|f| f.path == "CURRENT"));
        assert!(
            !first.files.iter().any(|f| f.path.ends_with(".log")),
            "no WAL: the capture flushed"
        );
        assert!(verify(&dir.path().join("snap-1"), &first.files)
            .unwrap()
            .is_empty());

        commit_round(&mut store, 3);
        let (_, again) = hashes.describe(&dir.path().join("snap-1")).unwrap();
        assert_eq!(
            again.files_hashed as usize,
            first
                .files
                .iter()
                .filter(|f| !f.path.ends_with(".sst"))
                .count(),
            "table files are hashed once"
        );
        let second = capture(&store, &dir.path().join("snap-2"), &mut hashes);
        assert_eq!(second.offset, 3);
        let new = second.files_not_in(&first);
        let kept_tables = first
            .files
            .iter()
            .filter(|f| f.path.ends_with(".sst") && second.files.contains(f))
            .count();
        assert!(
            kept_tables > 0,
            "{durability:?}: the first tables are shared"
        );
        assert!(new.len() < second.files.len());
        assert!(new.iter().all(|f| !first
            .files
            .iter()
            .any(|old| old.object_name() == f.object_name())));

        for (name, snapshot, expected) in [("snap-1", &first, 2), ("snap-2", &second, 3)] {
            let restored = tempfile::tempdir().unwrap();
            place(
                &dir.path().join(name),
                snapshot,
                &restored.path().join("store"),
            );
            let copy = open(restored.path(), 64 << 20, durability);
            assert_eq!(copy.committed_offset().unwrap(), Some(expected));
            assert_eq!(rounds(&copy), BTreeSet::from([expected]));
        }
        // The snapshots are files of their own: the store goes on, and closes, without them.
        commit_round(&mut store, 4);
        store.close().unwrap();
    }
}

/// Opens the files `at` holds (as their manifest lists them) as a store of their own.
fn restored(at: &Path, offset: i64, durability: Durability) -> (tempfile::TempDir, KeyValueStore) {
    let manifest = manifest_of(at, offset, &mut FileHashes::default());
    let restored = tempfile::tempdir().unwrap();
    place(at, &manifest, &restored.path().join("store"));
    let copy = open(restored.path(), 64 << 20, durability);
    (restored, copy)
}

#[test]
fn a_capture_without_a_wal_names_what_the_flush_wrote_and_leaves_later_commits_to_the_changelog() {
    // Commits made while the capture's flush runs are not flushed under the commit lock (the
    // next commit would wait for it): without a WAL the capture holds the flushed commit, and
    // names it; with a WAL the memtables count as persisted, so it flushes and holds the last.
    for (durability, expected) in [(Durability::Changelog, 0), (Durability::Wal, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), 64 << 20, durability);
        commit_round(&mut store, 0);
        let files = store.committed_files().unwrap();
        files.flush().unwrap();
        commit_round(&mut store, 1);
        let at = dir.path().join("capture");
        let offset = files.capture_flushed(&at).unwrap().unwrap();
        assert_eq!(offset, expected, "{durability:?}");
        let (_kept, copy) = restored(&at, offset, durability);
        assert_eq!(copy.committed_offset().unwrap(), Some(expected));
        assert_eq!(rounds(&copy), BTreeSet::from([expected]));
        assert_eq!(
            store.committed_offset().unwrap(),
            Some(1),
            "the store goes on"
        );
        assert_eq!(rounds(&store), BTreeSet::from([1]));
        store.close().unwrap();
    }
}

#[test]
fn a_capture_while_the_writer_commits_holds_exactly_the_commit_it_names() {
    // An 8 KiB bound spills every commit (several writes each): the capture must never land
    // between them. Without a WAL the capture names what the table files hold, which a flush
    // ending during the checkpoint would move on: then it captures again, flushing.
    for (bound, durability) in [
        (64 << 20, Durability::Wal),
        (8 << 10, Durability::Wal),
        (64 << 20, Durability::Changelog),
        (8 << 10, Durability::Changelog),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), bound, durability);
        commit_round(&mut store, 0);
        let files = store.committed_files().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let capturing = {
            let done = Arc::clone(&done);
            let root = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let mut captured = Vec::new();
                let mut i = 0;
                while !done.load(Ordering::Relaxed) || captured.is_empty() {
                    let at = root.join(format!("capture-{i}"));
                    let offset = files.capture(&at).unwrap().unwrap();
                    captured.push((at, offset));
                    i += 1;
                }
                captured
            })
        };
        for n in 1..40 {
            commit_round(&mut store, n);
        }
        done.store(true, Ordering::Relaxed);
        let captured = capturing.join().unwrap();
        store.close().unwrap();
        assert!(!captured.is_empty());
        for (at, offset) in captured {
            let (_kept, copy) = restored(&at, offset, durability);
            assert_eq!(copy.committed_offset().unwrap(), Some(offset));
            assert_eq!(
                rounds(&copy),
                BTreeSet::from([offset]),
                "bound {bound}, {durability:?}: the files hold the commit of offset {offset} only"
            );
        }
    }
}

#[test]
fn stores_without_committed_files_cannot_be_snapshotted() {
    let memory = KeyValueStore::open_in_memory("m", options(1 << 20, Durability::Wal));
    assert!(memory.committed_files().is_err());
    let dir = tempfile::tempdir().unwrap();
    let mut non_transactional = options(1 << 20, Durability::Wal);
    non_transactional.transactional = false;
    let (store, _) = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("store"),
        &dir.path().join(".s.uncommitted"),
        ValueFormat::Plain,
        non_transactional,
        &mut |_| {},
    )
    .unwrap();
    assert!(store.committed_files().is_err());

    let mut fresh = open(&dir.path().join("fresh"), 1 << 20, Durability::Wal);
    let files = fresh.committed_files().unwrap();
    let at = dir.path().join("never");
    assert_eq!(files.capture(&at).unwrap(), None, "nothing committed yet");
    assert!(!at.exists());
    fresh.close().unwrap();
    assert!(
        files.capture(&at).is_err(),
        "a closed store captures nothing"
    );
}

// -- segmented stores ---------------------------------------------------------------------------

const MINUTE: i64 = 60_000;
const RETENTION: i64 = 10 * MINUTE;
const SEGMENT_KEYS: u32 = 600;

fn segmented_options(max_uncommitted_bytes: usize, transactional: bool) -> SegmentedOptions {
    SegmentedOptions {
        retention_ms: RETENTION,
        segment_interval: segment_interval(RETENTION),
        format: ValueFormat::Plain,
        store: StoreOptions {
            transactional,
            ..options(max_uncommitted_bytes, Durability::Wal)
        },
        ttl: None,
        bloom_filters: true,
    }
}

/// The store `w` of task directory `task` (retention 10 minutes: 5-minute segments).
fn open_segmented(task: &Path, max_uncommitted_bytes: usize) -> SegmentedStore {
    SegmentedStore::open_rocksdb(
        "w",
        &task.join("w"),
        segmented_options(max_uncommitted_bytes, true),
        &mut |_| {},
    )
    .expect("open")
    .0
}

/// Writes `round` under every key whose segment `which` takes (key k goes to the segment of
/// `base + (k % 3) * 5 minutes`), commits it at offset `round`.
fn commit_segments(store: &mut SegmentedStore, round: i64, base: i64, which: impl Fn(u32) -> bool) {
    for k in (0..SEGMENT_KEYS).filter(|&k| which(k)) {
        let time = base + i64::from(k % 3) * 5 * MINUTE;
        let key = format!("key-{k:05}");
        assert!(store
            .put(key.as_bytes(), time, Some(&round.to_be_bytes()))
            .unwrap());
    }
    store.commit(Some(round), &mut |_| {}).unwrap();
}

/// Every `(key, segment, value)` of every segment.
fn segment_rows(store: &SegmentedStore) -> Vec<(String, i64, i64)> {
    let query = SegmentQuery {
        first_segment: i64::MIN,
        last_segment: i64::MAX,
        range: KeyRange::all(),
        direction: Direction::Forward,
        accept: Arc::new(|_| Ok(true)),
    };
    let mut rows = Vec::new();
    for id in store.segment_ids() {
        let query = SegmentQuery {
            first_segment: id,
            last_segment: id,
            ..query.clone()
        };
        for (key, value) in scan(store, &query, &mut ScanCursor::default(), usize::MAX).unwrap() {
            rows.push((
                String::from_utf8(key).unwrap(),
                id,
                i64::from_be_bytes(value.as_slice().try_into().unwrap()),
            ));
        }
    }
    rows
}

/// Captures `store`'s committed files at `at` and describes them as a window store's manifest.
fn capture_segments(
    store: &SegmentedStore,
    at: &Path,
    hashes: &mut FileHashes,
) -> (SegmentedCapture, SnapshotManifest) {
    let captured = store
        .committed_files()
        .unwrap()
        .capture(at)
        .unwrap()
        .unwrap();
    (captured, window_manifest(at, captured, hashes))
}

fn window_manifest(
    at: &Path,
    captured: SegmentedCapture,
    hashes: &mut FileHashes,
) -> SnapshotManifest {
    let (files, _) = hashes.describe(at).unwrap();
    let manifest = SnapshotManifest {
        offset: captured.offset,
        batch_id: None,
        kind: StoreKind::Window,
        created_ms: 0,
        stream_time: Some(captured.stream_time),
        files,
    };
    SnapshotManifest::decode(&manifest.encode().unwrap()).unwrap()
}

/// A new machine's task directory holding the snapshot at `from`, opened.
fn restore_segments(
    from: &Path,
    manifest: &SnapshotManifest,
) -> (tempfile::TempDir, SegmentedStore) {
    let task = tempfile::tempdir().unwrap();
    let dir = task.path().join("w");
    place(from, manifest, &dir);
    assert_eq!(
        segmented_snapshot::check_restored("w", &dir, RETENTION, segment_interval(RETENTION))
            .unwrap(),
        manifest
            .files
            .iter()
            .filter(|f| f.path.ends_with("/kstate-segment-interval"))
            .count()
    );
    segmented_snapshot::install("w", &dir, manifest.offset, manifest.stream_time.unwrap()).unwrap();
    let store = open_segmented(task.path(), 64 << 20);
    (task, store)
}

#[test]
fn a_segmented_snapshot_holds_every_live_segment_and_opens_at_its_offset_and_stream_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_segmented(dir.path(), 64 << 20);
    let mut hashes = FileHashes::default();
    for round in 0..3 {
        commit_segments(&mut store, round, 0, |_| true);
    }
    // A commit of one segment alone (offset and stream time in that segment's write).
    commit_segments(&mut store, 3, MINUTE, |k| k % 3 == 2);
    assert_eq!(store.segment_ids(), [0, 1, 2]);
    let (first, first_manifest) = capture_segments(&store, &dir.path().join("snap-1"), &mut hashes);
    assert_eq!(
        first,
        SegmentedCapture {
            offset: 3,
            stream_time: 11 * MINUTE,
            segments: 3
        }
    );
    for start in [0, 5 * MINUTE, 10 * MINUTE] {
        let segment = format!("w.{start}/");
        let files: Vec<&str> = first_manifest
            .files
            .iter()
            .filter_map(|f| f.path.strip_prefix(&segment))
            .collect();
        assert!(
            files.contains(&"kstate-segment-interval"),
            "{segment}: {files:?}"
        );
        assert!(files.contains(&"CURRENT") && files.iter().any(|f| f.ends_with(".sst")));
        assert!(
            !files.iter().any(|f| f.ends_with(".log")),
            "no WAL: the capture flushed"
        );
    }
    assert!(first_manifest
        .files
        .iter()
        .all(|f| f.path.starts_with("w.")));
    let (_, again) = hashes.describe(&dir.path().join("snap-1")).unwrap();
    assert_eq!(
        again.files_hashed as usize,
        first_manifest
            .files
            .iter()
            .filter(|f| !f.path.ends_with(".sst"))
            .count(),
        "table files are hashed once, in every segment"
    );

    // Stream time 25 minutes, reached by a commit through the commit intent (three segments):
    // segments 0-2 expire and are dropped; the snapshot names the stream time the segments'
    // files do not hold.
    commit_segments(&mut store, 4, 15 * MINUTE, |_| true);
    assert_eq!(store.segment_ids(), [3, 4, 5]);
    let (second, second_manifest) =
        capture_segments(&store, &dir.path().join("snap-2"), &mut hashes);
    assert_eq!(
        (second.offset, second.stream_time, second.segments),
        (4, 25 * MINUTE, 3)
    );
    assert!(second_manifest
        .files
        .iter()
        .all(|f| ["w.900000/", "w.1200000/", "w.1500000/"]
            .iter()
            .any(|s| f.path.starts_with(s))));

    let expected = |store: &SegmentedStore| (segment_rows(store), store.stream_time());
    let first_state = {
        // What the store held at offset 3: rounds 2 and 3 (segment 2's keys).
        let mut rows = Vec::new();
        for id in 0..3 {
            for k in (0..SEGMENT_KEYS).filter(|k| i64::from(k % 3) == id) {
                rows.push((format!("key-{k:05}"), id, if id == 2 { 3 } else { 2 }));
            }
        }
        rows.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        (rows, 11 * MINUTE)
    };
    let second_state = expected(&store);
    for (name, manifest, state, ids) in [
        ("snap-1", &first_manifest, &first_state, vec![0, 1, 2]),
        ("snap-2", &second_manifest, &second_state, vec![3, 4, 5]),
    ] {
        let (_task, copy) = restore_segments(&dir.path().join(name), manifest);
        assert_eq!(copy.committed_offset().unwrap(), Some(manifest.offset));
        assert_eq!(
            copy.segment_ids(),
            ids,
            "{name}: expired segments stay dropped"
        );
        assert_eq!(copy.stream_time(), state.1, "{name}: the stream time");
        assert!(segment_rows(&copy) == state.0, "{name}: the rows differ");
    }
    // The snapshots are files of their own: the store goes on, and closes, without them.
    commit_segments(&mut store, 5, 15 * MINUTE, |_| true);
    store.close().unwrap();
}

/// What `write_racing_round` leaves after rounds `0..=last`: `(segment, key) -> value` of the
/// live segments, and the stream time (the puts `commit_segments` makes, with retention).
fn racing_rounds(last: i64) -> (Vec<(String, i64, i64)>, i64) {
    let interval = segment_interval(RETENTION);
    let mut rows = std::collections::BTreeMap::new();
    let mut stream_time = -1;
    for round in 0..=last {
        for k in (0..SEGMENT_KEYS).filter(|&k| round % 2 == 0 || k % 3 == 2) {
            let time = round * MINUTE + i64::from(k % 3) * 5 * MINUTE;
            stream_time = stream_time.max(time);
            if time / interval >= (stream_time - RETENTION) / interval {
                rows.insert((time / interval, format!("key-{k:05}")), round);
            }
        }
    }
    let min_live = (stream_time - RETENTION) / interval;
    let live = rows
        .into_iter()
        .filter(|((id, _), _)| *id >= min_live)
        .map(|((id, key), value)| (key, id, value))
        .collect();
    (live, stream_time)
}

/// Round `round`: even rounds write every key (three segments, through the commit intent), odd
/// rounds a third of them (one segment, without it); a minute later each round, so segments
/// expire and are dropped as the rounds go.
fn write_racing_round(store: &mut SegmentedStore, round: i64) {
    let all = round % 2 == 0;
    commit_segments(store, round, round * MINUTE, |k| all || k % 3 == 2);
}

#[test]
fn a_segmented_capture_while_the_writer_commits_holds_exactly_the_commit_it_names() {
    // The 8 KiB bound spills every commit, which is then applied from the intent file. A
    // capture must never land inside a commit, nor miss a segment or hold a dropped one.
    for bound in [64 << 20, 8 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open_segmented(dir.path(), bound);
        write_racing_round(&mut store, 0);
        let files = store.committed_files().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let capturing = {
            let done = Arc::clone(&done);
            let root = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let mut captured = Vec::new();
                let mut i = 0;
                while !done.load(Ordering::Relaxed) || captured.is_empty() {
                    let at = root.join(format!("capture-{i}"));
                    captured.push((at.clone(), files.capture(&at).unwrap().unwrap()));
                    i += 1;
                }
                captured
            })
        };
        for round in 1..30 {
            write_racing_round(&mut store, round);
        }
        let oldest = store.segment_ids()[0];
        done.store(true, Ordering::Relaxed);
        let captured = capturing.join().unwrap();
        store.close().unwrap();
        assert_eq!(oldest, 5, "segments expired as the rounds went");
        assert!(!captured.is_empty());
        for (at, capture) in captured {
            let round = capture.offset;
            let (rows, stream_time) = racing_rounds(round);
            assert_eq!(capture.stream_time, stream_time);
            let manifest = window_manifest(&at, capture, &mut FileHashes::default());
            let (_task, copy) = restore_segments(&at, &manifest);
            assert_eq!(copy.committed_offset().unwrap(), Some(round));
            assert_eq!(copy.stream_time(), stream_time);
            assert!(
                segment_rows(&copy) == rows,
                "bound {bound}: the files hold the commit of offset {round} only"
            );
        }
    }
}

#[test]
fn a_snapshot_of_another_segment_interval_is_refused_before_it_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_segmented(dir.path(), 64 << 20);
    commit_segments(&mut store, 0, 0, |_| true);
    let at = dir.path().join("snap");
    capture_segments(&store, &at, &mut FileHashes::default());
    assert_eq!(
        segmented_snapshot::check_restored("w", &at, RETENTION, segment_interval(RETENTION))
            .unwrap(),
        3
    );
    // 20 minutes of retention: 10-minute segments, of which 5-minute starts are not all.
    let error = segmented_snapshot::check_restored("w", &at, 20 * MINUTE, 10 * MINUTE).unwrap_err();
    assert!(matches!(error, Error::InvalidState(_)), "{error}");
    // 2 minutes: 1-minute segments, of which every 5-minute start is one; the interval files
    // tell them apart.
    let error = segmented_snapshot::check_restored("w", &at, 2 * MINUTE, MINUTE).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("created with a segment interval of 300000 ms"),
        "{error}"
    );
}

#[test]
fn segmented_stores_without_committed_files_cannot_be_snapshotted() {
    let memory = SegmentedStore::open_in_memory("m", segmented_options(1 << 20, true)).unwrap();
    assert!(memory.committed_files().is_err());
    let dir = tempfile::tempdir().unwrap();
    let (written_through, _) = SegmentedStore::open_rocksdb(
        "w",
        &dir.path().join("through").join("w"),
        segmented_options(1 << 20, false),
        &mut |_| {},
    )
    .unwrap();
    assert!(written_through.committed_files().is_err());

    let mut fresh = open_segmented(&dir.path().join("fresh"), 1 << 20);
    fresh.put(b"k", 0, Some(b"staged")).unwrap();
    let files = fresh.committed_files().unwrap();
    let at = dir.path().join("never");
    assert_eq!(files.capture(&at).unwrap(), None, "nothing committed yet");
    assert!(!at.exists());
    fresh.close().unwrap();
    assert!(
        matches!(files.capture(&at), Err(Error::Closed(_))),
        "a closed store captures nothing"
    );
}
