//! Durable file writes shared by checkpoints and report exports.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` as `dir/name` so that a crash at any instant leaves the old file or the new
/// one: a temporary file `tmp_name` in the same folder, fsync, rename over, fsync the folder.
/// On failure, says which path failed.
pub fn write_atomic(dir: &Path, tmp_name: &str, name: &str, bytes: &[u8]) -> Result<PathBuf, (PathBuf, io::Error)> {
    fs::create_dir_all(dir).map_err(at(dir))?;
    let tmp = dir.join(tmp_name);
    let fin = dir.join(name);
    let mut f = File::create(&tmp).map_err(at(&tmp))?;
    f.write_all(bytes).map_err(at(&tmp))?;
    f.sync_all().map_err(at(&tmp))?;
    drop(f);
    fs::rename(&tmp, &fin).map_err(at(&fin))?;
    sync_dir(dir).map_err(at(dir))?;
    Ok(fin)
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
