//! Segment file names (spec 3.8, Kafka's `LogFileUtils`): the segment's base offset as 20
//! zero-padded decimal digits, an extension, and an optional temporary suffix.

use std::path::{Path, PathBuf};

/// Digits of the base offset in a file name (`i64::MAX` has 19, so any offset fits).
const OFFSET_DIGITS: usize = 20;

/// The three files of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum SegmentFile {
    /// `.log`: the message set.
    Log,
    /// `.index`: offset -> position.
    OffsetIndex,
    /// `.timeindex`: timestamp -> offset.
    TimeIndex,
}

impl SegmentFile {
    pub(crate) const ALL: [SegmentFile; 3] = [
        SegmentFile::Log,
        SegmentFile::OffsetIndex,
        SegmentFile::TimeIndex,
    ];

    fn extension(self) -> &'static str {
        match self {
            SegmentFile::Log => ".log",
            SegmentFile::OffsetIndex => ".index",
            SegmentFile::TimeIndex => ".timeindex",
        }
    }
}

/// Where a segment file is in its life. Kafka's suffixes: compaction writes `.cleaned` files,
/// renames them `.swap` once complete, and renames replaced files `.deleted` before removing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FileStage {
    Live,
    Cleaned,
    Swap,
    Deleted,
}

impl FileStage {
    fn suffix(self) -> &'static str {
        match self {
            FileStage::Live => "",
            FileStage::Cleaned => ".cleaned",
            FileStage::Swap => ".swap",
            FileStage::Deleted => ".deleted",
        }
    }
}

/// Kafka's `filenamePrefixFromOffset`: `50` -> `"00000000000000000050"`.
pub fn filename_prefix(base_offset: i64) -> String {
    format!("{base_offset:0OFFSET_DIGITS$}")
}

/// The path of one segment file, e.g. `<dir>/00000000000000000050.timeindex.swap`.
pub(crate) fn segment_path(
    dir: &Path,
    base_offset: i64,
    file: SegmentFile,
    stage: FileStage,
) -> PathBuf {
    dir.join(format!(
        "{}{}{}",
        filename_prefix(base_offset),
        file.extension(),
        stage.suffix()
    ))
}

/// Parses a segment file name; `None` for any other file (Kafka's `.snapshot`, `.txnindex`,
/// checkpoint files and anything unknown are left alone).
pub(crate) fn parse_segment_file_name(name: &str) -> Option<(i64, SegmentFile, FileStage)> {
    let digits = name.get(..OFFSET_DIGITS)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base_offset: i64 = digits.parse().ok()?;
    let rest = name.get(OFFSET_DIGITS..)?;
    for file in SegmentFile::ALL {
        let Some(suffix) = rest.strip_prefix(file.extension()) else {
            continue;
        };
        let stage = [
            FileStage::Live,
            FileStage::Cleaned,
            FileStage::Swap,
            FileStage::Deleted,
        ]
        .into_iter()
        .find(|stage| stage.suffix() == suffix)?;
        return Some((base_offset, file, stage));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_spec_6_4() {
        let dir = Path::new("/p");
        assert_eq!(filename_prefix(50), "00000000000000000050");
        assert_eq!(
            segment_path(dir, 50, SegmentFile::Log, FileStage::Live),
            Path::new("/p/00000000000000000050.log")
        );
        assert_eq!(
            segment_path(dir, 50, SegmentFile::OffsetIndex, FileStage::Live),
            Path::new("/p/00000000000000000050.index")
        );
        assert_eq!(
            segment_path(dir, 50, SegmentFile::TimeIndex, FileStage::Swap),
            Path::new("/p/00000000000000000050.timeindex.swap")
        );
        assert_eq!(filename_prefix(i64::MAX), "09223372036854775807");
    }

    #[test]
    fn parsing_round_trips_and_ignores_other_files() {
        assert_eq!(
            parse_segment_file_name("00000000000000000050.index.cleaned"),
            Some((50, SegmentFile::OffsetIndex, FileStage::Cleaned))
        );
        assert_eq!(
            parse_segment_file_name("00000000000000000007.log"),
            Some((7, SegmentFile::Log, FileStage::Live))
        );
        for other in [
            "00000000000000000050.snapshot",
            "00000000000000000050.txnindex",
            "00000000000000000050.log.bak",
            "leader-epoch-checkpoint",
            "0000000000000000005.log",
            "99999999999999999999.log",
            "",
        ] {
            assert_eq!(parse_segment_file_name(other), None, "{other}");
        }
    }
}
