//! Files in and out. Reading a user-supplied file goes through `read_limited` (one open, the
//! open file's own metadata, regular files only, a size limit) and `gunzip_limited`; durable
//! writes go through `write_atomic` (an exclusively created temporary file, fsync, rename,
//! fsync of the folder; the temporary file removed on failure).

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// 1 MiB, for limits.
pub const MIB: u64 = 1 << 20;

/// Opens `path` for reading and checks what was opened: a regular file, or an error saying
/// what it is instead (a FIFO, a device, a folder…). The checks look at the open file itself
/// (`File::metadata`), so a link swapped in after some earlier look cannot slip past them.
/// The open does not wait for a writer (a FIFO opened for reading would block until one came).
/// Returns the file and its length.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let mut opts = fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Regular files ignore O_NONBLOCK; it only keeps a FIFO's open from waiting.
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = opts.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}, not a regular file: give the path of a file", file_kind(&meta)),
        ));
    }
    Ok((file, meta.len()))
}

/// What a path that is not a regular file is, in words.
fn file_kind(meta: &fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

/// `n` bytes in words: "64 MiB", or the byte count.
fn size_text(n: u64) -> String {
    if n >= MIB && n.is_multiple_of(MIB) { format!("{} MiB", n / MIB) } else { format!("{n} bytes") }
}

fn too_large(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("{len} bytes or more, over the {} a file of this kind may have: not read", size_text(limit)),
    )
}

/// Reads all of `r`, at most `limit` bytes; more is an error (nothing beyond `limit + 1` bytes
/// is read or held). `hint` sizes the first allocation (at most `limit`).
pub fn read_at_most(r: impl Read, limit: u64, hint: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(hint.min(limit).min(usize::MAX as u64) as usize);
    r.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(too_large(out.len() as u64, limit));
    }
    Ok(out)
}

/// A user-supplied file's bytes: one open (`open_regular`), refused unread when its length is
/// over `limit`, and read with the limit (a file that grows while it is read is refused too).
pub fn read_limited(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    if len > limit {
        return Err(too_large(len, limit));
    }
    read_at_most(file, limit, len)
}

/// `read_limited`, as UTF-8 text.
pub fn read_text_limited(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_limited(path, limit)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))
}

/// A gzip stream's decompressed bytes, at most `limit` of them: a reader that fails
/// (`FileTooLarge`) as soon as the stream would give more, so a small file that expands a
/// thousandfold is never decompressed past the limit. A corrupt stream, or a checksum that
/// does not match, fails with `InvalidData`.
pub struct GunzipLimited<R: Read> {
    decoder: flate2::read::GzDecoder<R>,
    left: u64,
    limit: u64,
}

/// Decompresses one gzip member from `compressed`, at most `limit` bytes (`GunzipLimited`).
pub fn gunzip_reader<R: Read>(compressed: R, limit: u64) -> GunzipLimited<R> {
    GunzipLimited { decoder: flate2::read::GzDecoder::new(compressed), left: limit, limit }
}

impl<R: Read> Read for GunzipLimited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte past the limit is enough to know the stream is longer.
        let want = (buf.len() as u64).min(self.left.saturating_add(1)) as usize;
        let n = self.decoder.read(&mut buf[..want]).map_err(|e| match e.kind() {
            io::ErrorKind::Interrupted => e,
            _ => io::Error::new(io::ErrorKind::InvalidData, format!("corrupt gzip data: {e}")),
        })?;
        if n as u64 > self.left {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("decompresses to more than the {} a file of this kind may hold: not read", size_text(self.limit)),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// All of a gzip stream's decompressed bytes, at most `limit` (`GunzipLimited`).
pub fn gunzip_limited(compressed: impl Read, limit: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    gunzip_reader(compressed, limit).read_to_end(&mut out)?;
    Ok(out)
}

/// Writes `bytes` as `dir/name` so that a crash at any instant leaves the old file or the new
/// one: a temporary file in the same folder, fsync, rename over, fsync the folder. A path that
/// holds something other than a regular file is refused (`replaceable`). The
/// temporary file's name starts with `tmp_prefix`, gets a random part, and is created
/// exclusively (never through a link another user left at a guessable name); it is removed
/// again when anything fails. On failure, says which path failed.
pub fn write_atomic(dir: &Path, tmp_prefix: &str, name: &str, bytes: &[u8]) -> Result<PathBuf, (PathBuf, io::Error)> {
    fs::create_dir_all(dir).map_err(at(dir))?;
    let fin = dir.join(name);
    replaceable(&fin).map_err(at(&fin))?;
    let mut builder = tempfile::Builder::new();
    builder.prefix(tmp_prefix).suffix(".tmp");
    #[cfg(unix)]
    {
        // What File::create gives (0666 less the umask), not tempfile's private 0600: the
        // file is renamed into place and kept.
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(at(dir))?;
    let tmp_path = tmp.path().to_path_buf();
    // Dropping `tmp` on any error below removes the temporary file.
    tmp.write_all(bytes).map_err(at(&tmp_path))?;
    tmp.as_file().sync_all().map_err(at(&tmp_path))?;
    tmp.persist(&fin).map_err(|e| (fin.clone(), e.error))?;
    sync_dir(dir).map_err(at(dir))?;
    Ok(fin)
}

/// `write_atomic` to a file path (its folder, "." when it has none; the temporary file
/// `.NAME.*.tmp` beside it). A path without a file name is refused.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<PathBuf, (PathBuf, io::Error)> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| (path.to_path_buf(), io::Error::new(io::ErrorKind::InvalidInput, "not a file path (it has no file name)")))?;
    write_atomic(dir, &format!(".{name}."), name, bytes)
}

/// Whether `write_atomic` may put a new file at `path`: nothing there, a regular file, or a link
/// (followed) to one. A FIFO, a device node (`/dev/full`), a socket or a folder is refused by
/// name: the rename would replace it with a regular file, and the one who named it meant it.
/// A dangling link is replaced, as writing through it would have made a file.
pub fn replaceable(path: &Path) -> io::Result<()> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_file() {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} is there, not a regular file: give the path of a file to write", file_kind(&meta)),
    ))
}

/// Makes a rename durable. Windows cannot open a folder as a file; NTFS journals renames.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir).and_then(|d| d.sync_all())?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn at(p: &Path) -> impl FnOnce(io::Error) -> (PathBuf, io::Error) + '_ {
    move |e| (p.to_path_buf(), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn reads_a_regular_file_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        fs::write(&p, b"{}\n").unwrap();
        assert_eq!(read_limited(&p, 3).unwrap(), b"{}\n");
        let e = read_limited(&p, 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("3 bytes") && e.to_string().contains("2 bytes"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn devices_fifos_and_folders_are_refused_by_name_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Without O_NONBLOCK the open itself would wait for a writer for ever: run it on a
        // thread so a regression fails by the deadline instead of hanging the suite.
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || tx.send(read_limited(&f, 1 << 20).map_err(|e| e.to_string())));
        let got = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("reading a FIFO blocked");
        assert!(got.as_ref().is_err_and(|e| e.contains("FIFO") && e.contains("not a regular file")), "{got:?}");
        let e = read_limited(Path::new("/dev/zero"), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
        let e = read_limited(dir.path(), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("folder"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_judged_by_what_it_opens() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("report.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(read_limited(&link, 1 << 20).unwrap_err().to_string().contains("character device"));
        fs::remove_file(&link).unwrap();
        fs::write(dir.path().join("real"), b"ok").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), &link).unwrap();
        assert_eq!(read_limited(&link, 10).unwrap(), b"ok");
    }

    #[test]
    fn gunzip_stops_at_its_limit() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![0u8; 4 << 20]).unwrap();
        let small = gz.finish().unwrap();
        assert!(small.len() < 16 << 10, "{} bytes", small.len());
        assert_eq!(gunzip_limited(&small[..], 4 << 20).unwrap().len(), 4 << 20);
        let e = gunzip_limited(&small[..], 1 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        let e = gunzip_limited(&small[..small.len() / 2], 8 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn atomic_write_leaves_only_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_atomic(dir.path(), ".a.json.", "a.json", b"one").unwrap();
        write_atomic(dir.path(), ".a.json.", "a.json", b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["a.json"]);
    }

    /// The rename fails (the name is a non-empty folder): the temporary file must go too.
    #[test]
    fn a_failed_atomic_write_removes_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a.json").join("inside")).unwrap();
        let (path, _) = write_atomic(dir.path(), ".a.json.", "a.json", b"x").unwrap_err();
        assert_eq!(path, dir.path().join("a.json"));
        assert_eq!(names(dir.path()), ["a.json"], "a temporary file was left behind");
    }

    /// An output path that exists and is not a regular file (a FIFO, a device node, a folder) is
    /// refused by name and left as it was: the rename would put a regular file where it was
    /// (`--set export=/dev/full`, run as root, replaced the device). A link to a regular file
    /// is still written through as before.
    #[cfg(unix)]
    #[test]
    fn an_existing_fifo_or_device_is_refused_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (path, e) = write_atomic(dir.path(), ".x.fifo.", "x.fifo", b"data").unwrap_err();
        assert_eq!(path, fifo);
        assert!(e.to_string().contains("FIFO") && e.to_string().contains("not a regular file"), "{e}");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
        assert_eq!(names(dir.path()), ["x.fifo"], "a temporary file was left behind");
        // A character device like /dev/full (1, 7), made in the temporary folder; only root may
        // make one, so elsewhere the FIFO above is the case.
        let dev = dir.path().join("full");
        let c = std::ffi::CString::new(dev.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mknod only creates a node.
        if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 7)) } == 0 {
            let (_, e) = write_atomic(dir.path(), ".full.", "full", b"data").unwrap_err();
            assert!(e.to_string().contains("character device"), "{e}");
            assert!(fs::symlink_metadata(&dev).unwrap().file_type().is_char_device(), "the device node was replaced");
        }
        // Links: to a FIFO, refused; to a regular file, written as before.
        std::os::unix::fs::symlink(&fifo, dir.path().join("to-fifo")).unwrap();
        assert!(write_atomic(dir.path(), ".to-fifo.", "to-fifo", b"data").unwrap_err().1.to_string().contains("FIFO"));
        fs::write(dir.path().join("real"), b"old").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("to-real")).unwrap();
        write_atomic(dir.path(), ".to-real.", "to-real", b"new").unwrap();
        assert_eq!(fs::read(dir.path().join("to-real")).unwrap(), b"new");
    }

    /// Another user's link at the old, guessable temporary name is neither followed nor
    /// overwritten: the temporary file is a new one with a random name.
    #[cfg(unix)]
    #[test]
    fn a_link_at_a_guessable_temporary_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        for guess in [".a.json.", ".a.json..tmp", ".a.json.tmp"] {
            std::os::unix::fs::symlink(&victim, dir.path().join(guess)).unwrap();
        }
        write_atomic(dir.path(), ".a.json.", "a.json", b"new").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(dir.path().join("a.json")).unwrap(), b"new");
    }
}
