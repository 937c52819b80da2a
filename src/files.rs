//! Reading the files the offline commands are given (`check`, `test`,
//! `policy suggest`, policy files), and writing every file the binary writes
//! (keys, certificates, exports, recordings): the one place they meet the
//! file system.
//!
//! A file is written as a new file beside its destination, then renamed over
//! it ([`replace`]): never through what is already there. A key is created
//! readable by its owner only, whatever the file it replaces allowed; a
//! symlink at the destination is replaced, not followed, so the file it led
//! to is untouched; a reader never sees half a file.
//!
//! The files come from anyone (a pull request to a suite folder, evidence
//! copied off a cluster), so:
//! - only a regular file is read (a symlink to one is followed); a FIFO, a
//!   socket or a device is refused before it is opened, as it could block
//!   the reader for ever or never end;
//! - a file is read up to a limit (for a review, the largest body the
//!   webhook accepts), never without end;
//! - a walk of a folder reads each folder once, however many symlinks lead
//!   to it: a symlink loop, or two links to one folder, is reported, never
//!   followed again.

use std::collections::HashMap;
use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest AdmissionReview body the webhook accepts by default
/// (`serve --max-body-bytes`), and so the largest review `check` and `test`
/// read by default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The largest policy file read: far more than any policy needs (a
/// ConfigMap holds at most 1 MiB).
pub const MAX_POLICY_BYTES: u64 = DEFAULT_MAX_BODY_BYTES as u64;

/// Why a file was not read. Carried inside an [`io::Error`], whose message
/// it is, so a caller names the file as it names any other I/O error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A FIFO, a socket, a device or a folder: what it is.
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
}

impl From<NotRead> for io::Error {
    fn from(why: NotRead) -> io::Error {
        let kind = match why {
            NotRead::NotRegular(_) => io::ErrorKind::InvalidInput,
            NotRead::TooLarge { .. } => io::ErrorKind::FileTooLarge,
        };
        io::Error::new(kind, why)
    }
}

/// What a file type is, for [`NotRead::NotRegular`].
fn what(file_type: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_symlink() {
        "a symlink"
    } else {
        "of an unknown type"
    }
}

fn regular(meta: &Metadata) -> io::Result<()> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(NotRead::NotRegular(what(meta.file_type())).into())
    }
}

/// Opens `path` for reading if it is a regular file (following symlinks).
/// Anything else is refused before it is opened; one swapped in between
/// is opened without blocking (a FIFO's open waits for a writer) and
/// refused too.
pub fn open_regular(path: &Path) -> io::Result<File> {
    regular(&std::fs::metadata(path)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // No effect on a regular file's reads.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    regular(&file.metadata()?)?;
    Ok(file)
}

/// The bytes of the regular file at `path`, refused when larger than `limit`.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let size = file.metadata()?.len();
    if size > limit {
        return Err(NotRead::TooLarge { limit }.into());
    }
    // The size said may be wrong (a file of /proc says 0): read at most
    // one byte more than the limit, to know.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(NotRead::TooLarge { limit }.into());
    }
    Ok(bytes)
}

/// What a walk of a folder found, in the order found.
#[derive(Debug)]
pub enum Found {
    /// Anything but a folder: to be read with [`open_regular`] or
    /// [`read_regular`], which refuse what is not a regular file.
    File(PathBuf),
    /// A folder reached again (a symlink loop, or a second link to a
    /// folder): not read again.
    Again { path: PathBuf, first: PathBuf },
    /// A folder that could not be listed, or an entry that could not be
    /// looked at (a dangling symlink, say).
    Error { path: PathBuf, error: io::Error },
}

impl Found {
    pub fn path(&self) -> &Path {
        match self {
            Found::File(path) | Found::Again { path, .. } | Found::Error { path, .. } => path,
        }
    }
}

/// Why a folder was not read again, in one line.
pub fn again(first: &Path) -> String {
    format!(
        "the folder {} again (a symlink loop, or a second link to it): not read twice",
        first.display()
    )
}

/// Walks the folder `root`: the entries whose names `wanted` accepts, in
/// name order, each folder among them walked in its turn (depth first) and
/// every other entry found as a file. Symlinks are followed, but no folder
/// is walked twice: folders are known by device and inode.
pub fn walk(root: &Path, wanted: &dyn Fn(&Path) -> bool) -> Vec<Found> {
    let mut walk = Walk {
        wanted,
        seen: HashMap::new(),
        found: Vec::new(),
    };
    match std::fs::metadata(root) {
        Ok(meta) => walk.folder(root, &meta),
        Err(error) => walk.found.push(Found::Error {
            path: root.to_path_buf(),
            error,
        }),
    }
    walk.found
}

struct Walk<'w> {
    wanted: &'w dyn Fn(&Path) -> bool,
    /// Each folder walked, by (device, inode), and the path it was walked by.
    seen: HashMap<(u64, u64), PathBuf>,
    found: Vec<Found>,
}

impl Walk<'_> {
    fn folder(&mut self, path: &Path, meta: &Metadata) {
        if let Some(first) = self.seen.get(&identity(meta)) {
            let first = first.clone();
            return self.found.push(Found::Again {
                path: path.to_path_buf(),
                first,
            });
        }
        self.seen.insert(identity(meta), path.to_path_buf());
        let mut entries = Vec::new();
        let listed = std::fs::read_dir(path).and_then(|list| {
            for entry in list {
                entries.push(entry?.path());
            }
            Ok(())
        });
        if let Err(error) = listed {
            return self.found.push(Found::Error {
                path: path.to_path_buf(),
                error,
            });
        }
        entries.sort();
        for entry in entries {
            if !(self.wanted)(&entry) {
                continue;
            }
            match std::fs::metadata(&entry) {
                Ok(meta) if meta.is_dir() => self.folder(&entry, &meta),
                Ok(_) => self.found.push(Found::File(entry)),
                Err(error) => self.found.push(Found::Error { path: entry, error }),
            }
        }
    }
}

/// Who may read a file [`replace`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Its owner only (0600): a private key.
    Owner,
    /// Anyone (0644, less what the umask takes away): a certificate, an export.
    Everyone,
}

/// How many names [`NewFile::write`] tries before it gives up: each is new
/// and random, so only someone creating files under the same names could
/// take them all.
const NEW_NAME_ATTEMPTS: u32 = 64;

/// A file written beside its destination, not yet in place:
/// [`NewFile::commit`] renames it over the destination; dropped
/// uncommitted, it is removed. For writing several files all or nothing.
#[derive(Debug)]
pub struct NewFile {
    /// `None` once committed.
    written: Option<PathBuf>,
    destination: PathBuf,
}

impl NewFile {
    /// Writes `bytes` to a new file in `destination`'s folder, created with
    /// `access` (exclusively: never an existing file, never through a
    /// symlink), and flushed to disk.
    pub fn write(destination: &Path, bytes: &[u8], access: Access) -> io::Result<NewFile> {
        use std::io::Write;
        let name = destination
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "names no file"))?
            .to_string_lossy();
        let folder = match destination.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut options = std::fs::OpenOptions::new();
        // create_new: O_CREAT | O_EXCL, which fails on anything there, a
        // symlink (even a dangling one) included.
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(match access {
                Access::Owner => 0o600,
                Access::Everyone => 0o644,
            });
        }
        #[cfg(not(unix))]
        let _ = access;
        let mut attempt = 0;
        let (path, mut file) = loop {
            let path = folder.join(format!(".{name}.{:016x}.tmp", random()));
            match options.open(&path) {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    attempt += 1;
                    if attempt == NEW_NAME_ATTEMPTS {
                        return Err(io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!("{NEW_NAME_ATTEMPTS} new file names beside it were all taken"),
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let new = NewFile {
            written: Some(path),
            destination: destination.to_path_buf(),
        };
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(new)
    }

    /// Renames the file over its destination: a symlink there is replaced,
    /// not followed.
    pub fn commit(mut self) -> io::Result<()> {
        let written = self.written.take().expect("a NewFile is committed once");
        std::fs::rename(&written, &self.destination).inspect_err(|_| {
            let _ = std::fs::remove_file(&written);
        })
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if let Some(written) = self.written.take() {
            let _ = std::fs::remove_file(written);
        }
    }
}

/// Writes `bytes` to `path`: a new file beside it, readable as `access`
/// says, renamed over it ([`NewFile`]).
pub fn replace(path: &Path, bytes: &[u8], access: Access) -> io::Result<()> {
    NewFile::write(path, bytes, access)?.commit()
}

/// 64 random bits: std's hasher keys, drawn from the system's randomness.
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.finish()
}

/// Why a folder is not one only its owner may write in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotPrivate {
    #[error("is a symlink: give a real folder, or remove the link")]
    Symlink,
    #[error("is not a folder")]
    NotAFolder,
    #[error(
        "belongs to user {owner}, not to you (user {me}): anyone who owns it could change what is written there; remove it, or give another folder"
    )]
    NotMine { owner: u32, me: u32 },
    #[error(
        "is writable by {who} (mode {mode:04o}), who could change what is written there: chmod go-w it, or give another folder"
    )]
    Writable { who: &'static str, mode: u32 },
    /// Where a file's owner and modes are not Unix ones (Windows): nothing
    /// is taken as private that could not be checked.
    #[error(
        "cannot be checked here: its owner and who may write in it are checked on Linux and macOS only, so it is not trusted"
    )]
    Unchecked,
}

impl From<NotPrivate> for io::Error {
    fn from(why: NotPrivate) -> io::Error {
        io::Error::new(io::ErrorKind::PermissionDenied, why)
    }
}

/// Makes sure `dir` is a folder only the current user may write in, as ssh
/// wants `~/.ssh`: created (0700) when missing; refused when it is a
/// symlink, not a folder, owned by another user, or writable by its group or
/// others. For a folder of a shared place (`$TMPDIR`) where someone else
/// may have made it first, to plant a symlink or a file of their own.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    // A symlink to a folder passes here: the look below refuses it.
    builder.create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(NotPrivate::Symlink.into());
    }
    if !meta.is_dir() {
        return Err(NotPrivate::NotAFolder.into());
    }
    owned_by_me_alone(&meta)
}

/// Makes sure what is at `path` can be trusted as the current user's own,
/// before a secret is read from it (a CA's key to be reused): not a
/// symlink (a folder given may be one: it is followed), owned by the
/// current user, and writable by no one else. Refused as [`private_dir`]
/// refuses a folder.
pub fn mine(path: &Path) -> io::Result<()> {
    let meta = if path.is_dir() {
        std::fs::metadata(path)?
    } else {
        let meta = std::fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Err(NotPrivate::Symlink.into());
        }
        meta
    };
    owned_by_me_alone(&meta)
}

/// `meta` is the current user's, and writable by no one else.
#[cfg(unix)]
fn owned_by_me_alone(meta: &Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(NotPrivate::NotMine {
            owner: meta.uid(),
            me,
        }
        .into());
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 {
            "others"
        } else {
            "its group"
        };
        return Err(NotPrivate::Writable { who, mode }.into());
    }
    Ok(())
}

/// Without Unix owners and modes, nothing is known to be the user's alone.
#[cfg(not(unix))]
fn owned_by_me_alone(_: &Metadata) -> io::Result<()> {
    Err(NotPrivate::Unchecked.into())
}

#[cfg(unix)]
fn identity(meta: &Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// Without inodes, no folder is known twice: only the files' reading is guarded.
#[cfg(not(unix))]
fn identity(_: &Metadata) -> (u64, u64) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    (0, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn not_read(e: &io::Error) -> Option<NotRead> {
        e.get_ref()?.downcast_ref::<NotRead>().cloned()
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    /// A key replacing a file anyone could read is its owner's alone; a
    /// symlink at the name is replaced, the file it led to untouched; a
    /// file left uncommitted is removed.
    #[test]
    fn a_file_is_replaced_never_written_through() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("tls.key");
        std::fs::write(&key, "old").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        replace(&key, b"new", Access::Owner).unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"new");
        assert_eq!(mode(&key), 0o600);

        let outside = dir.path().join("outside");
        std::fs::write(&outside, "keep").unwrap();
        let cert = dir.path().join("tls.crt");
        symlink(&outside, &cert).unwrap();
        replace(&cert, b"cert", Access::Everyone).unwrap();
        assert!(std::fs::symlink_metadata(&cert).unwrap().is_file());
        assert_eq!(std::fs::read(&cert).unwrap(), b"cert");
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        assert_eq!(mode(&cert) & !0o644, 0);

        let pending = NewFile::write(&dir.path().join("x"), b"x", Access::Owner).unwrap();
        drop(pending);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["outside", "tls.crt", "tls.key"]);
        // A folder where the file should be: refused, nothing left.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert!(replace(&dir.path().join("d"), b"x", Access::Owner).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    }

    #[test]
    fn a_private_folder_is_made_or_refused_with_why() {
        use std::os::unix::fs::PermissionsExt;
        let not_private = |e: io::Error| {
            e.get_ref()
                .and_then(|e| e.downcast_ref::<NotPrivate>())
                .cloned()
        };
        let dir = tempfile::tempdir().unwrap();
        let made = dir.path().join("a/b");
        private_dir(&made).unwrap();
        assert_eq!(mode(&made), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        // Once made, taken as it is.
        private_dir(&made).unwrap();
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&made).unwrap();

        for (bits, who) in [(0o775, "its group"), (0o757, "others"), (0o1777, "others")] {
            std::fs::set_permissions(&made, std::fs::Permissions::from_mode(bits)).unwrap();
            let e = private_dir(&made).unwrap_err();
            assert_eq!(
                not_private(e),
                Some(NotPrivate::Writable { who, mode: bits })
            );
        }
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = dir.path().join("link");
        symlink(&made, &link).unwrap();
        assert_eq!(
            not_private(private_dir(&link).unwrap_err()),
            Some(NotPrivate::Symlink)
        );
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(private_dir(&file).is_err());

        // Someone else's folder: only root can make one here to try.
        let me = rustix::process::geteuid().as_raw();
        if me == 0 {
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            assert_eq!(
                not_private(private_dir(&theirs).unwrap_err()),
                Some(NotPrivate::NotMine { owner: 65534, me })
            );
        }
    }

    #[test]
    fn a_symlink_loop_is_walked_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("c.json"), "{}").unwrap();
        // Each link leads back: without the inodes, 2^depth paths.
        symlink(".", root.join("a.json")).unwrap();
        symlink(".", root.join("b.json")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        symlink("..", root.join("sub/up")).unwrap();
        let found = walk(root, &|_| true);
        let seen: Vec<String> = found
            .iter()
            .map(|f| {
                let path = f.path().strip_prefix(root).unwrap().display().to_string();
                match f {
                    Found::File(_) => format!("file {path}"),
                    Found::Again { first, .. } => {
                        assert_eq!(first, root);
                        format!("again {path}")
                    }
                    Found::Error { error, .. } => format!("error {path}: {error}"),
                }
            })
            .collect();
        assert_eq!(
            seen,
            [
                "again a.json",
                "again b.json",
                "file c.json",
                "again sub/up"
            ]
        );
    }

    #[test]
    fn only_regular_files_are_read_and_only_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        // Refused, not blocked on: nobody ever writes to it.
        let e = read_regular(&fifo, 10).unwrap_err();
        assert_eq!(not_read(&e), Some(NotRead::NotRegular("a FIFO")), "{e}");
        assert_eq!(e.to_string(), "not a regular file (a FIFO)");
        let e = read_regular(dir.path(), 10).unwrap_err();
        assert_eq!(not_read(&e), Some(NotRead::NotRegular("a folder")));
        let e = read_regular(Path::new("/dev/zero"), 10).unwrap_err();
        assert_eq!(
            not_read(&e),
            Some(NotRead::NotRegular("a character device"))
        );

        let file = dir.path().join("r.json");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        let e = read_regular(&file, 9).unwrap_err();
        assert_eq!(not_read(&e), Some(NotRead::TooLarge { limit: 9 }));
        // Through a symlink, the file it leads to.
        let link = dir.path().join("l.json");
        symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 10).unwrap(), b"0123456789");
        let link = dir.path().join("f.json");
        symlink(&fifo, &link).unwrap();
        assert!(read_regular(&link, 10).is_err());
    }
}
