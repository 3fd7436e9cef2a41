//! Positional file reads and writes, directory syncs, and I/O errors that name the file.
//!
//! Segment files are read and written at explicit positions (`pread`/`pwrite`), so readers
//! never share a file cursor and a `&File` is enough.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// Adds what was being done (and to which file) to an I/O error.
pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|error| Error::Storage(format!("{}: {error}", what())))
    }
}

/// Fills `buffer` from `file` at `position`.
pub(crate) fn read_exact_at(file: &File, buffer: &mut [u8], position: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buffer, position)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buffer.len() {
            let read = std::os::windows::fs::FileExt::seek_read(
                file,
                &mut buffer[done..],
                position + done as u64,
            )?;
            if read == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += read;
        }
        Ok(())
    }
}

/// Writes all of `bytes` to `file` at `position`.
pub(crate) fn write_all_at(file: &File, bytes: &[u8], position: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, position)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < bytes.len() {
            let written = std::os::windows::fs::FileExt::seek_write(
                file,
                &bytes[done..],
                position + done as u64,
            )?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            done += written;
        }
        Ok(())
    }
}

/// Writes `value` to `path` as text, atomically and durably (a temporary file, fsync, rename,
/// directory sync): the changelog's marker files, a segment's interval file.
pub(crate) fn write_number_file(path: &Path, value: i64) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    std::io::Write::write_all(&mut file, format!("{value}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    path.parent().map_or(Ok(()), sync_dir)
}

/// The number `write_number_file` wrote to `path`; `None` when there is no such file, and
/// `Corrupted` (naming it `what`) when it holds anything else.
pub(crate) fn read_number_file(path: &Path, what: &str) -> Result<Option<i64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::Corrupted(format!("{what} {} holds {text:?}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Makes renames, creations and deletions in `dir` durable (a no-op where directories cannot
/// be opened, as on Windows).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|handle| handle.sync_all())
            .context(|| format!("syncing directory {}", dir.display()))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

pub(crate) fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).context(|| format!("renaming {} to {}", from.display(), to.display()))
}

/// Removes a file; one that is already gone is fine.
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}
