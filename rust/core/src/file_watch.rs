//! Waiting until a file of one name is created or touched in any of a set of directories, without
//! polling: Linux's inotify, one descriptor for all the directories, and a pipe that wakes the
//! waiter at once when asked to. Linux only (the module is not built elsewhere).
//!
//! A Python worker keeps its parked stores until another worker asks for them by creating a
//! request file in their task directory (`kstate.spark.protocol.idle`). Checking for it every
//! few milliseconds cost each worker ~3% of a core for as long as it had stores parked, and made
//! its running task hand the GIL to the checking thread each time; a wait here costs nothing
//! until the file appears. Where it is not available, the caller polls.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};

const EVENTS: u32 = libc::IN_CREATE | libc::IN_ATTRIB | libc::IN_MOVED_TO;
/// `struct inotify_event`'s size before its name.
const HEADER: usize = std::mem::size_of::<libc::inotify_event>();

/// Directories watched for a file named `name`; see the module's documentation.
pub struct FileWatch {
    name: Vec<u8>,
    inotify: OwnedFd,
    /// The pipe [`FileWatch::wake`] writes to and [`FileWatch::wait`] polls with `inotify`.
    wake_read: OwnedFd,
    wake_write: OwnedFd,
    /// Watch descriptors by directory.
    dirs: Mutex<HashMap<PathBuf, i32>>,
}

fn os_error(what: &str) -> Error {
    Error::Storage(format!("{what}: {}", io::Error::last_os_error()))
}

impl FileWatch {
    /// A watch for files named `name` (in no directory yet).
    pub fn new(name: &str) -> Result<Self> {
        // SAFETY: plain system calls; each descriptor returned is owned once, right here.
        let inotify = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if inotify < 0 {
            return Err(os_error("inotify_init1"));
        }
        let inotify = unsafe { OwnedFd::from_raw_fd(inotify) };
        let mut pipe = [0; 2];
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(os_error("pipe2"));
        }
        let (wake_read, wake_write) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        Ok(Self {
            name: name.as_bytes().to_vec(),
            inotify,
            wake_read,
            wake_write,
            dirs: Mutex::new(HashMap::new()),
        })
    }

    fn dirs_locked(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, i32>> {
        self.dirs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Watches `dir` too (again: no change).
    pub fn add(&self, dir: &Path) -> Result<()> {
        let path = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| Error::InvalidArgument(format!("{} has a NUL byte", dir.display())))?;
        // SAFETY: a valid descriptor and NUL-terminated path.
        let wd =
            unsafe { libc::inotify_add_watch(self.inotify.as_raw_fd(), path.as_ptr(), EVENTS) };
        if wd < 0 {
            return Err(os_error(&format!("watching {}", dir.display())));
        }
        self.dirs_locked().insert(dir.to_path_buf(), wd);
        Ok(())
    }

    /// Stops watching `dir` (not watched: no change).
    pub fn remove(&self, dir: &Path) {
        if let Some(wd) = self.dirs_locked().remove(dir) {
            // SAFETY: a valid descriptor; a watch the kernel dropped already (its directory
            // deleted) fails harmlessly.
            unsafe { libc::inotify_rm_watch(self.inotify.as_raw_fd(), wd) };
        }
    }

    /// The directories watched.
    #[cfg(test)]
    fn dirs(&self) -> Vec<PathBuf> {
        self.dirs_locked().keys().cloned().collect()
    }

    /// Waits up to `timeout` until a file of the name is created or touched in a watched
    /// directory, or [`FileWatch::wake`] is called; says whether either happened (`false`: the
    /// time passed). Called by one thread at a time; the others may add, remove and wake.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let mut fds = [
            libc::pollfd {
                fd: self.inotify.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake_read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: two valid pollfd entries.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(Error::Storage(format!("poll: {error}")));
        }
        let woken = fds[1].revents != 0 && self.drain_wakes();
        let named = fds[0].revents != 0 && self.read_events()?;
        Ok(woken || named)
    }

    /// Empties the wake pipe; whether it held anything.
    fn drain_wakes(&self) -> bool {
        let mut buffer = [0u8; 64];
        let mut any = false;
        // SAFETY: a valid descriptor and buffer; the pipe is non-blocking.
        while unsafe {
            libc::read(
                self.wake_read.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        } > 0
        {
            any = true;
        }
        any
    }

    /// Reads every queued event; whether one named the file (or events were lost).
    fn read_events(&self) -> Result<bool> {
        let mut buffer = [0u8; 4096];
        let mut named = false;
        loop {
            // SAFETY: a valid descriptor and buffer; inotify's descriptor is non-blocking.
            let n = unsafe {
                libc::read(
                    self.inotify.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            if n == 0 {
                return Ok(named);
            }
            if n < 0 {
                let error = io::Error::last_os_error();
                return match error.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(named),
                    _ => Err(Error::Storage(format!("reading inotify events: {error}"))),
                };
            }
            let mut at = 0;
            let end = n as usize;
            while at + HEADER <= end {
                // SAFETY: the kernel wrote whole events; read unaligned from the buffer.
                let event: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buffer[at..].as_ptr().cast()) };
                let name_end = (at + HEADER + event.len as usize).min(end);
                let name = &buffer[at + HEADER..name_end];
                let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
                named |= event.mask & libc::IN_Q_OVERFLOW != 0 || name == self.name.as_slice();
                at = name_end;
            }
        }
    }

    /// Ends a [`FileWatch::wait`] under way now, or the next one at once.
    pub fn wake(&self) -> Result<()> {
        // SAFETY: a valid descriptor; a full pipe (EAGAIN) already wakes the waiter.
        let n = unsafe { libc::write(self.wake_write.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
            return Err(os_error("waking the file watch"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kstate-file-watch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_of_the_name_created_or_touched_in_a_watched_directory_ends_the_wait() {
        let (a, b) = (temp_dir("a"), temp_dir("b"));
        let watch = FileWatch::new(".request").unwrap();
        watch.add(&a).unwrap();
        watch.add(&b).unwrap();
        assert!(
            !watch.wait(Duration::from_millis(20)).unwrap(),
            "nothing yet"
        );
        std::fs::write(a.join("other"), b"").unwrap();
        assert!(
            !watch.wait(Duration::from_millis(20)).unwrap(),
            "another name"
        );
        std::fs::write(b.join(".request"), b"").unwrap();
        assert!(watch.wait(Duration::from_secs(5)).unwrap());
        // Touched again (a second request while the first is still there).
        let touched = std::process::Command::new("touch")
            .arg(b.join(".request"))
            .status()
            .unwrap();
        assert!(touched.success());
        assert!(watch.wait(Duration::from_secs(5)).unwrap());
        watch.remove(&b);
        std::fs::write(b.join(".request"), b"again").unwrap();
        std::fs::remove_file(b.join(".request")).unwrap();
        std::fs::write(b.join(".request"), b"").unwrap();
        assert!(
            !watch.wait(Duration::from_millis(20)).unwrap(),
            "not watched any more"
        );
        assert_eq!(watch.dirs(), vec![a.clone()]);
        for dir in [a, b] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_wake_ends_the_wait_at_once_and_a_deleted_directory_is_harmless() {
        let dir = temp_dir("wake");
        let watch = std::sync::Arc::new(FileWatch::new(".request").unwrap());
        watch.add(&dir).unwrap();
        let waiter = {
            let watch = watch.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                (
                    watch.wait(Duration::from_secs(30)).unwrap(),
                    started.elapsed(),
                )
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        watch.wake().unwrap();
        let (woken, took) = waiter.join().unwrap();
        assert!(woken && took < Duration::from_secs(5), "{took:?}");
        std::fs::remove_dir_all(&dir).unwrap();
        let _ = watch.wait(Duration::from_millis(20)).unwrap();
        watch.remove(&dir);
        assert!(watch.dirs().is_empty());
    }
}
