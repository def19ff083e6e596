//! The log's seam to the disk. Everything the log persists (segments,
//! indexes, checkpoints, snapshots) goes through [`Storage`] and the
//! [`StorageFile`]s it opens: [`FileStorage`] is the real file system, and
//! [`MemStorage`] keeps files in memory with unsynced writes apart from
//! synced ones, so a test (or the simulation) can crash a node and lose what
//! was never fsynced, tear the tail of what was being written, or make a
//! write or fsync fail, deterministically.
//!
//! The calls are blocking; callers run them off the async workers.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// An open file: positional reads and writes, length changes and fsync.
pub trait StorageFile: Send + Sync {
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `pos`; an error if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()>;
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every write so far durable (fsync).
    fn sync(&self) -> io::Result<()>;
    /// When the file was last written, in milliseconds since the epoch.
    fn modified_ms(&self) -> io::Result<i64>;
    /// The open file descriptor, when the file is a real one: a fetch
    /// response sends its bytes with `sendfile` from it (zero-copy).
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// A run of bytes of a segment file, not read yet. The file stays open
/// while the slice lives (a deleted segment's bytes stay readable).
#[derive(Clone)]
pub struct FileSlice {
    pub file: Arc<dyn StorageFile>,
    pub pos: u64,
    pub len: usize,
}

impl FileSlice {
    /// Appends the slice's bytes to `out`.
    pub fn read_into(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let at = out.len();
        out.resize(at + self.len, 0);
        self.file.read_exact_at(&mut out[at..], self.pos)?;
        Ok(())
    }
}

impl std::fmt::Debug for FileSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileSlice({}..+{})", self.pos, self.len)
    }
}

/// A file system: opening files and the directory operations the log uses.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens `path` for reading and writing; with `create`, an absent file
    /// is created empty.
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>>;
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn exists(&self, path: &Path) -> bool;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The paths of the directory's entries (files and directories).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Replaces `path` with `data` atomically and durably: written to
    /// `path.tmp`, fsynced, renamed over `path`, directory fsynced, so a
    /// reader finds the old or the new content.
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        {
            let f = self.open(&tmp, true)?;
            f.set_len(0)?;
            f.write_all_at(data, 0)?;
            f.sync()?;
        }
        self.rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            self.sync_dir(dir)?;
        }
        Ok(())
    }

    /// The whole content of a file; `None` if it does not exist.
    fn read_opt(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match self.read(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes a file; one already gone is not an error.
    fn remove_if_exists(&self, path: &Path) -> io::Result<()> {
        match self.remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FileStorage;

impl FileStorage {
    pub fn shared() -> Arc<dyn Storage> {
        Arc::new(FileStorage)
    }
}

struct RealFile(File);

impl StorageFile for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, pos)
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        self.0.write_all_at(buf, pos)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(&self.0))
    }
    fn modified_ms(&self) -> io::Result<i64> {
        let t = self.0.metadata()?.modified()?;
        let d = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(io::Error::other)?;
        Ok(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

impl Storage for FileStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect()
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        // As the default, with one write call for the data.
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(data)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            self.sync_dir(dir)?;
        }
        Ok(())
    }
}

/// One in-memory file: what a reader sees, and what survives a crash.
#[derive(Debug, Default, Clone)]
struct MemFileData {
    data: Vec<u8>,
    synced: Vec<u8>,
    modified_ms: i64,
}

/// An injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// fsync of a file whose path starts with the prefix (text) fails
    /// (EIO), and what it was to make durable stays unsynced.
    FailSync(PathBuf),
    /// Writes of a file whose path starts with the prefix fail (ENOSPC: a
    /// full disk).
    FailWrite(PathBuf),
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, Arc<Mutex<MemFileData>>>,
    dirs: std::collections::BTreeSet<PathBuf>,
    faults: Vec<Fault>,
    /// The time writes are stamped with (a simulation sets it).
    now_ms: i64,
}

/// A file system in memory. Directory operations are durable at once (as a
/// journalling file system orders them before the data); file contents are
/// durable only up to their last successful fsync. [`MemStorage::crash`]
/// throws away every unsynced byte, or keeps a prefix of each file's
/// unsynced tail (a torn write), as a power cut would.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    state: Arc<Mutex<MemState>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock has failed already; its
    // state is still the best there is to look at.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl MemStorage {
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    pub fn shared(&self) -> Arc<dyn Storage> {
        Arc::new(self.clone())
    }

    /// Adds a fault; it holds until [`MemStorage::clear_faults`].
    pub fn inject(&self, fault: Fault) {
        lock(&self.state).faults.push(fault);
    }

    pub fn clear_faults(&self) {
        lock(&self.state).faults.clear();
    }

    /// Sets the time later writes are stamped with (file modification times).
    pub fn set_now_ms(&self, now_ms: i64) {
        lock(&self.state).now_ms = now_ms;
    }

    /// A power cut: every file goes back to what was synced, except that
    /// `keep_unsynced(path, unsynced_len)` may keep a prefix of a file's
    /// unsynced bytes (a torn write). Content beyond the synced length that
    /// differs from it in place (an overwrite) is lost whole.
    pub fn crash(&self, mut keep_unsynced: impl FnMut(&Path, usize) -> usize) {
        let state = lock(&self.state);
        for (path, file) in &state.files {
            let mut f = lock(file);
            let synced_len = f.synced.len();
            let extends = f.data.len() > synced_len && f.data[..synced_len] == f.synced[..];
            let mut survivor = f.synced.clone();
            if extends {
                let unsynced = f.data.len() - synced_len;
                let keep = keep_unsynced(path, unsynced).min(unsynced);
                survivor.extend_from_slice(&f.data[synced_len..synced_len + keep]);
            }
            f.data = survivor.clone();
            f.synced = survivor;
        }
    }

    /// Bytes written to a file and not yet synced (0 when in sync).
    pub fn unsynced_bytes(&self, path: &Path) -> usize {
        let state = lock(&self.state);
        state.files.get(path).map_or(0, |f| {
            let f = lock(f);
            if f.data == f.synced {
                0
            } else {
                f.data.len().max(f.synced.len())
            }
        })
    }

    /// Every file's path, for tests that look around.
    pub fn files(&self) -> Vec<PathBuf> {
        lock(&self.state).files.keys().cloned().collect()
    }

    fn fault(&self, path: &Path, write: bool) -> Option<io::Error> {
        let state = lock(&self.state);
        // A prefix of the path's text: a directory, or a file name's start.
        let under = |p: &Path| {
            path.as_os_str()
                .as_encoded_bytes()
                .starts_with(p.as_os_str().as_encoded_bytes())
        };
        state.faults.iter().find_map(|f| match f {
            Fault::FailSync(p) if !write && under(p) => Some(io::Error::other(format!(
                "injected fsync failure on {}",
                path.display()
            ))),
            Fault::FailWrite(p) if write && under(p) => Some(io::Error::new(
                io::ErrorKind::StorageFull,
                format!("injected full disk writing {}", path.display()),
            )),
            _ => None,
        })
    }
}

struct MemFile {
    path: PathBuf,
    data: Arc<Mutex<MemFileData>>,
    storage: MemStorage,
}

impl StorageFile for MemFile {
    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.data).data.len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        let f = lock(&self.data);
        let start = usize::try_from(pos).map_err(io::Error::other)?;
        let end = start.checked_add(buf.len()).filter(|e| *e <= f.data.len());
        let Some(end) = end else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            ));
        };
        buf.copy_from_slice(&f.data[start..end]);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        if let Some(e) = self.storage.fault(&self.path, true) {
            return Err(e);
        }
        let now_ms = lock(&self.storage.state).now_ms;
        let mut f = lock(&self.data);
        let start = usize::try_from(pos).map_err(io::Error::other)?;
        let end = start + buf.len();
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        f.data[start..end].copy_from_slice(buf);
        f.modified_ms = now_ms;
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let now_ms = lock(&self.storage.state).now_ms;
        let mut f = lock(&self.data);
        f.data.resize(len, 0);
        f.modified_ms = now_ms;
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        if let Some(e) = self.storage.fault(&self.path, false) {
            return Err(e);
        }
        let mut f = lock(&self.data);
        f.synced = f.data.clone();
        Ok(())
    }
    fn modified_ms(&self) -> io::Result<i64> {
        Ok(lock(&self.data).modified_ms)
    }
}

impl Storage for MemStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let mut state = lock(&self.state);
        let parent_exists = path
            .parent()
            .is_none_or(|d| d.as_os_str().is_empty() || state.dirs.contains(d));
        if !state.files.contains_key(path) {
            if !create || !parent_exists {
                return Err(not_found(path));
            }
            state.files.insert(
                path.to_path_buf(),
                Arc::new(Mutex::new(MemFileData::default())),
            );
        }
        let data = state.files[path].clone();
        Ok(Box::new(MemFile {
            path: path.to_path_buf(),
            data,
            storage: self.clone(),
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = lock(&self.state);
        let f = state.files.get(path).ok_or_else(|| not_found(path))?;
        let data = lock(f).data.clone();
        Ok(data)
    }
    fn exists(&self, path: &Path) -> bool {
        let state = lock(&self.state);
        state.files.contains_key(path) || state.dirs.contains(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        lock(&self.state)
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        if let Some(f) = state.files.remove(from) {
            state.files.insert(to.to_path_buf(), f);
            return Ok(());
        }
        if !state.dirs.contains(from) {
            return Err(not_found(from));
        }
        // A directory: move it and everything under it.
        let moved: Vec<PathBuf> = state
            .files
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for p in moved {
            let rel = p
                .strip_prefix(from)
                .map_err(io::Error::other)?
                .to_path_buf();
            if let Some(f) = state.files.remove(&p) {
                state.files.insert(to.join(rel), f);
            }
        }
        let dirs: Vec<PathBuf> = state
            .dirs
            .iter()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for d in dirs {
            state.dirs.remove(&d);
            let rel = d
                .strip_prefix(from)
                .map_err(io::Error::other)?
                .to_path_buf();
            state.dirs.insert(to.join(rel));
        }
        Ok(())
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        for d in dir.ancestors() {
            if !d.as_os_str().is_empty() {
                state.dirs.insert(d.to_path_buf());
            }
        }
        Ok(())
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let state = lock(&self.state);
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let child = |p: &&PathBuf| p.parent() == Some(dir);
        Ok(state
            .files
            .keys()
            .filter(child)
            .chain(state.dirs.iter().filter(child))
            .cloned()
            .collect())
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        state.files.retain(|p, _| !p.starts_with(dir));
        state.dirs.retain(|p| !p.starts_with(dir));
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self.fault(dir, false) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_what_was_synced() {
        let s = MemStorage::new();
        let dir = Path::new("/d");
        s.create_dir_all(dir).unwrap();
        let f = s.open(&dir.join("a"), true).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        f.sync().unwrap();
        f.write_all_at(b" world", 5).unwrap();
        assert_eq!(s.read(&dir.join("a")).unwrap(), b"hello world");
        s.crash(|_, _| 0);
        assert_eq!(s.read(&dir.join("a")).unwrap(), b"hello");
        // A torn write keeps a prefix of the unsynced tail.
        f.write_all_at(b" world", 5).unwrap();
        s.crash(|_, unsynced| unsynced / 2);
        assert_eq!(s.read(&dir.join("a")).unwrap(), b"hello wo");
    }

    #[test]
    fn an_overwrite_not_synced_is_lost_whole() {
        let s = MemStorage::new();
        s.create_dir_all(Path::new("/d")).unwrap();
        let f = s.open(Path::new("/d/a"), true).unwrap();
        f.write_all_at(b"abcdef", 0).unwrap();
        f.sync().unwrap();
        f.set_len(2).unwrap();
        f.write_all_at(b"XYZW", 2).unwrap();
        s.crash(|_, n| n);
        assert_eq!(s.read(Path::new("/d/a")).unwrap(), b"abcdef");
    }

    #[test]
    fn injected_faults_fail_writes_and_syncs_under_their_prefix() {
        let s = MemStorage::new();
        s.create_dir_all(Path::new("/d/p")).unwrap();
        let f = s.open(Path::new("/d/p/a"), true).unwrap();
        let g = s.open(Path::new("/d/q"), true).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        s.inject(Fault::FailSync("/d/p".into()));
        assert!(f.sync().is_err());
        g.sync().unwrap();
        s.crash(|_, _| 0);
        assert_eq!(s.read(Path::new("/d/p/a")).unwrap(), b"");
        s.inject(Fault::FailWrite("/d".into()));
        assert_eq!(
            g.write_all_at(b"y", 0).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        s.clear_faults();
        g.write_all_at(b"y", 0).unwrap();
    }

    #[test]
    fn atomic_replace_and_directories() {
        let s = MemStorage::new();
        let dir = Path::new("/d/t-0");
        s.create_dir_all(dir).unwrap();
        s.write_atomic(&dir.join("cp"), b"1").unwrap();
        s.write_atomic(&dir.join("cp"), b"2").unwrap();
        s.crash(|_, n| n);
        assert_eq!(s.read_opt(&dir.join("cp")).unwrap(), Some(b"2".to_vec()));
        assert_eq!(s.list_dir(dir).unwrap(), vec![dir.join("cp")]);
        s.rename(dir, Path::new("/d/t-0-delete")).unwrap();
        assert!(!s.exists(&dir.join("cp")));
        assert!(s.exists(Path::new("/d/t-0-delete/cp")));
        s.remove_dir_all(Path::new("/d/t-0-delete")).unwrap();
        assert!(s.files().is_empty());
        assert!(s.open(&dir.join("x"), true).is_err(), "no parent directory");
    }
}
