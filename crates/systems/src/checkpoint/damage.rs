//! Deliberate damage to a checkpoint file, to show (and test) that loading refuses it and a
//! resume falls back to an older one.

use std::fs;
use std::path::Path;

use super::CheckpointError;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Damage {
    /// Cut the file to this fraction of its length (as a crash mid-copy would).
    Truncate(f64),
    /// Flip one bit in the JSON header.
    FlipHeader,
    /// Flip one bit in the middle of the tensor data.
    FlipData,
}

impl std::str::FromStr for Damage {
    type Err = gpulab_core::Error;
    fn from_str(s: &str) -> gpulab_core::Result<Self> {
        match s {
            "truncate" => Ok(Damage::Truncate(0.5)),
            "flip-header" => Ok(Damage::FlipHeader),
            "flip-data" => Ok(Damage::FlipData),
            _ => Err(gpulab_core::Error::InvalidConfig(format!("unknown damage {s:?}; use truncate, flip-header or flip-data"))),
        }
    }
}

/// Applies `damage` to the file at `path` in place; returns a sentence saying what changed.
pub fn damage(path: &Path, damage: Damage) -> Result<String, CheckpointError> {
    let io = |source| CheckpointError::Io { path: path.into(), source };
    let mut bytes = gpulab_core::fsutil::read_limited(path, super::store::MAX_BYTES).map_err(io)?;
    let header_end = bytes.get(..8).map(|b| 8 + u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize).unwrap_or(0).min(bytes.len());
    let what = match damage {
        Damage::Truncate(f) => {
            let keep = (bytes.len() as f64 * f.clamp(0.0, 1.0)) as usize;
            let was = bytes.len();
            bytes.truncate(keep);
            format!("truncated from {was} to {keep} bytes")
        }
        Damage::FlipHeader => {
            // The header's first byte is its opening brace; any flip there breaks the JSON.
            let at = 8.min(bytes.len().saturating_sub(1));
            bytes[at] ^= 0x01;
            format!("flipped one bit at byte {at} (in the header)")
        }
        Damage::FlipData => {
            let at = header_end + (bytes.len() - header_end) / 2;
            let at = at.min(bytes.len().saturating_sub(1));
            bytes[at] ^= 0x10;
            format!("flipped one bit at byte {at} (in the tensor data)")
        }
    };
    fs::write(path, &bytes).map_err(io)?;
    Ok(what)
}
