//! Walking the message-set entries of a segment file, chunk by chunk, with their CRCs checked
//! (the codec's shallow iteration). Recovery, reads, index rebuilds and compaction all use it.

use std::fs::File;

use super::file_io::{self, IoContext};
use crate::error::Result;
use crate::record::{shallow_entries, Entry};

/// Bytes read at a time; a larger entry is read whole.
pub(crate) const SCAN_CHUNK_BYTES: usize = 1 << 20;
/// `LOG_OVERHEAD`: the offset and size before each message.
pub(crate) const ENTRY_HEADER_BYTES: usize = 12;

/// One entry as seen by a scan.
pub(crate) struct ScannedEntry<'a> {
    /// Position of the entry in the file.
    pub position: u64,
    pub entry: Entry<'a>,
    /// The entry's bytes exactly as stored.
    pub bytes: &'a [u8],
}

/// What the visitor wants next.
pub(crate) enum Visit {
    Continue,
    /// Stop before this entry, which is fine.
    Stop,
    /// This entry must not be in the log (e.g. its offset goes backwards): stop as if corrupt.
    Reject(String),
}

/// Where a scan ended: the end of the range (`problem` is `None`), the entry a visitor stopped
/// at, or the first bad entry (`problem` says why; everything before `position` is good).
pub(crate) struct ScanEnd {
    pub position: u64,
    pub problem: Option<String>,
}

/// Visits the entries of `file` in `[start, end)`, in order. `chunk_bytes` is how much to read
/// at once.
pub(crate) fn scan_entries(
    file: &File,
    start: u64,
    end: u64,
    chunk_bytes: usize,
    visit: &mut dyn FnMut(ScannedEntry<'_>) -> Result<Visit>,
) -> Result<ScanEnd> {
    let chunk_bytes = chunk_bytes.max(ENTRY_HEADER_BYTES);
    let mut position = start;
    let mut buffer = Vec::new();
    let mut read_len = chunk_bytes;
    while position < end {
        let remaining = end - position;
        let len = usize::try_from(remaining).map_or(read_len, |remaining| remaining.min(read_len));
        buffer.resize(len, 0);
        file_io::read_exact_at(file, &mut buffer, position)
            .context(|| format!("reading {len} bytes at {position} of a segment"))?;

        let mut entries = shallow_entries(&buffer);
        // `while let` rather than `for`: the loop body needs `entries.position()`.
        #[allow(clippy::while_let_on_iterator)]
        while let Some(next) = entries.next() {
            let entry = match next {
                Ok(entry) => entry,
                Err(error) => {
                    return Ok(ScanEnd {
                        position: position + entries.position() as u64,
                        problem: Some(error.to_string()),
                    })
                }
            };
            let entry_position = position + entry.position as u64;
            let Some(bytes) = buffer.get(entry.position..entry.position + entry.size) else {
                break;
            };
            match visit(ScannedEntry {
                position: entry_position,
                entry,
                bytes,
            })? {
                Visit::Continue => {}
                Visit::Stop => {
                    return Ok(ScanEnd {
                        position: entry_position,
                        problem: None,
                    })
                }
                Visit::Reject(problem) => {
                    return Ok(ScanEnd {
                        position: entry_position,
                        problem: Some(problem),
                    })
                }
            }
        }

        let consumed = entries.position();
        if consumed > 0 {
            position += consumed as u64;
            read_len = chunk_bytes;
            continue;
        }
        // Not even one whole entry in what was read.
        if len as u64 == remaining {
            return Ok(ScanEnd {
                position,
                problem: Some(format!(
                    "the last {remaining} bytes are a partial entry (torn write)"
                )),
            });
        }
        let entry_len = buffer
            .get(8..ENTRY_HEADER_BYTES)
            .and_then(|size| size.try_into().ok())
            .map(i32::from_be_bytes)
            .and_then(|size| usize::try_from(size).ok())
            .map_or(0, |size| size + ENTRY_HEADER_BYTES);
        if entry_len as u64 > remaining || entry_len <= len {
            return Ok(ScanEnd {
                position,
                problem: Some(format!(
                    "entry claims {entry_len} bytes but only {remaining} remain (torn write)"
                )),
            });
        }
        read_len = entry_len;
    }
    Ok(ScanEnd {
        position,
        problem: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Compression, Magic, MessageSetBuilder};
    use std::io::Write;

    fn set(count: i64, value_len: usize) -> Vec<u8> {
        let mut builder = MessageSetBuilder::new(Magic::V1, Compression::None);
        for offset in 0..count {
            builder
                .append(offset, offset, Some(b"k"), Some(&vec![7; value_len]))
                .unwrap();
        }
        builder.build().unwrap()
    }

    fn scan_all(bytes: &[u8], chunk: usize) -> (Vec<(u64, i64)>, ScanEnd) {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        let mut seen = Vec::new();
        let end = scan_entries(&file, 0, bytes.len() as u64, chunk, &mut |scanned| {
            seen.push((scanned.position, scanned.entry.offset));
            Ok(Visit::Continue)
        })
        .unwrap();
        (seen, end)
    }

    #[test]
    fn entries_larger_than_a_chunk_are_read_whole() {
        let bytes = set(5, 100);
        let (seen, end) = scan_all(&bytes, 50);
        assert_eq!(seen.len(), 5);
        assert_eq!(end.position, bytes.len() as u64);
        assert!(end.problem.is_none());
    }

    #[test]
    fn a_torn_tail_ends_the_scan_at_the_last_whole_entry() {
        let bytes = set(3, 10);
        let entry = bytes.len() / 3;
        for cut in [1, 11, 12, 20, entry - 1] {
            let torn = &bytes[..bytes.len() - cut];
            for chunk in [16, 1 << 20] {
                let (seen, end) = scan_all(torn, chunk);
                assert_eq!(seen.len(), 2, "cut {cut} chunk {chunk}");
                assert_eq!(end.position, 2 * entry as u64);
                assert!(end.problem.is_some());
            }
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let (seen, end) = scan_all(&flipped, 1 << 20);
        assert_eq!(seen.len(), 2);
        assert!(end.problem.unwrap().contains("CRC"));
    }
}
