//! gpulab's one disk cache: small measured facts about an adapter (the matmul variant it runs
//! fastest, its peak FLOP/s and bandwidth), kept so they are measured once, not on every start.
//!
//! Every entry is keyed by the adapter's identity (name, API, driver, device type), gpulab's
//! version and what is cached (`kind`), so a new driver or version measures again. Reading is
//! tolerant — a missing, corrupt or stale file is simply a miss, and the caller measures — and
//! writing goes through `fsutil::write_atomic` (temp file, fsync, rename), so a crash leaves
//! the old file or the new one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::tensor::BackendInfo;

/// gpulab's cache folder: GPULAB_CACHE_DIR, else the user's cache folder.
pub fn dir() -> Option<PathBuf> {
    std::env::var_os("GPULAB_CACHE_DIR").map(PathBuf::from).or_else(|| dirs::cache_dir().map(|d| d.join("gpulab")))
}

/// What an entry is about: the kind of fact, the adapter, and this gpulab's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey(String);

impl CacheKey {
    pub fn new(kind: &str, info: &BackendInfo) -> Self {
        CacheKey(format!(
            "{kind} | {} | {} | {} | {} | gpulab {}",
            info.name,
            info.api,
            info.driver,
            info.device_type,
            env!("CARGO_PKG_VERSION")
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A cache file larger than this is a miss (gpulab's hold a few entries of a few bytes).
const MAX_BYTES: u64 = 16 << 20;

/// One JSON file of key → value entries.
pub struct DiskCache {
    dir: PathBuf,
    file: String,
}

impl DiskCache {
    /// `file` in gpulab's cache folder; None when there is no cache folder at all.
    pub fn named(file: &str) -> Option<Self> {
        Some(Self::at(dir()?, file))
    }

    pub fn at(dir: PathBuf, file: &str) -> Self {
        DiskCache { dir, file: file.to_string() }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.file)
    }

    /// Every entry whose value still parses as JSON; an unreadable file is an empty cache.
    fn entries(&self) -> BTreeMap<String, serde_json::Value> {
        crate::fsutil::read_limited(&self.path(), MAX_BYTES).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// The cached value for `key`, or None when it is absent or no longer has the shape `T`.
    pub fn get<T: DeserializeOwned>(&self, key: &CacheKey) -> Option<T> {
        self.entries().remove(key.as_str()).and_then(|v| serde_json::from_value(v).ok())
    }

    /// Stores `value` under `key`, keeping the other entries. A failure is returned for the
    /// caller to ignore or log: an unwritable cache only means measuring again next time.
    pub fn put<T: Serialize>(&self, key: &CacheKey, value: &T) -> Result<(), String> {
        let mut entries = self.entries();
        entries.insert(key.as_str().to_string(), serde_json::to_value(value).map_err(|e| e.to_string())?);
        let bytes = serde_json::to_vec_pretty(&entries).map_err(|e| e.to_string())?;
        crate::fsutil::write_atomic(&self.dir, &format!(".{}.", self.file), &self.file, &bytes)
            .map(|_| ())
            .map_err(|(p, e)| format!("{}: {e}", p.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(driver: &str) -> BackendInfo {
        BackendInfo {
            kind: crate::tensor::BackendKind::Gpu,
            name: "llvmpipe".into(),
            api: "Vulkan".into(),
            driver: driver.into(),
            device_type: "Cpu".into(),
            software: true,
            timestamps: true,
        }
    }

    fn temp_cache(test: &str) -> DiskCache {
        let dir = std::env::temp_dir().join(format!("gpulab-cache-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        DiskCache::at(dir, "facts.json")
    }

    #[test]
    fn round_trip_keeps_other_entries() {
        let c = temp_cache("round-trip");
        let (a, b) = (CacheKey::new("peaks", &info("Mesa 24")), CacheKey::new("matmul-variant", &info("Mesa 24")));
        assert_eq!(c.get::<f64>(&a), None, "an absent file is a miss");
        c.put(&a, &1.5f64).unwrap();
        c.put(&b, &"tiled").unwrap();
        assert_eq!(c.get::<f64>(&a), Some(1.5));
        assert_eq!(c.get::<String>(&b).as_deref(), Some("tiled"));
        let left: Vec<_> = std::fs::read_dir(&c.dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["facts.json"], "no temporary file is left behind");
        let _ = std::fs::remove_dir_all(&c.dir);
    }

    #[test]
    fn corrupt_or_stale_file_is_a_miss_and_is_overwritten() {
        let c = temp_cache("corrupt");
        let k = CacheKey::new("peaks", &info("Mesa 24"));
        std::fs::create_dir_all(&c.dir).unwrap();
        std::fs::write(c.path(), b"{\"truncated").unwrap();
        assert_eq!(c.get::<f64>(&k), None, "corrupt JSON is a miss, not a panic");
        std::fs::write(c.path(), format!("{{{:?}: \"not a number\"}}", k.as_str())).unwrap();
        assert_eq!(c.get::<f64>(&k), None, "an entry of the wrong shape (an older format) is a miss");
        c.put(&k, &2.0f64).unwrap();
        assert_eq!(c.get::<f64>(&k), Some(2.0));
        let _ = std::fs::remove_dir_all(&c.dir);
    }

    #[test]
    fn a_changed_key_invalidates() {
        let c = temp_cache("key-change");
        c.put(&CacheKey::new("peaks", &info("Mesa 24")), &1.0f64).unwrap();
        assert_eq!(c.get::<f64>(&CacheKey::new("peaks", &info("Mesa 25"))), None, "a new driver measures again");
        assert_eq!(c.get::<f64>(&CacheKey::new("matmul-variant", &info("Mesa 24"))), None, "another kind is another entry");
        let mut other = info("Mesa 24");
        other.device_type = "DiscreteGpu".into();
        assert_eq!(c.get::<f64>(&CacheKey::new("peaks", &other)), None);
        let _ = std::fs::remove_dir_all(&c.dir);
    }
}
