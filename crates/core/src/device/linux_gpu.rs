//! GPU utilisation and VRAM beside NVML, read from what the Linux kernel drivers publish (small
//! readers of our own: the crates for this are LGPL or pull in heavy stacks). Every reading
//! names the file it came from.
//!
//! - AMD (amdgpu): `/sys/class/drm/cardN/device/gpu_busy_percent` (the driver's own busy %, the
//!   whole GPU, every process), `mem_info_vram_used` and `mem_info_vram_total` (bytes).
//! - Intel (i915, xe) and any driver with DRM fdinfo: `/proc/self/fdinfo/<fd>` of this
//!   process's DRM file descriptors. i915 counts busy nanoseconds per engine
//!   (`drm-engine-render: 123 ns`), xe counts cycles (`drm-cycles-rcs` of
//!   `drm-total-cycles-rcs`); a busy % needs two samples — Δbusy ns ÷ Δwall ns, or Δcycles ÷
//!   Δtotal cycles. Only this process's use (gpulab's own work), not other programs'.
//!   Memory: `drm-resident-<region>` (KiB/MiB), e.g. `vram0` or `local0`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One GPU's figures from a kernel interface, with where they came from.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct GpuReading {
    /// "amdgpu card0" or "i915 client 7 (0000:00:02.0)".
    pub name: String,
    /// The file or directory the figures were read from.
    pub source: String,
    /// Busy %: the driver's (AMD) or computed from two samples (fdinfo).
    pub busy_percent: Option<f64>,
    pub vram_used: Option<u64>,
    pub vram_total: Option<u64>,
}

/// The most read of one sysfs or fdinfo file (a sysfs attribute is at most a page; fdinfo a
/// few hundred bytes): through `fsutil`'s bounded reader, regular files only, like every file
/// gpulab reads.
const MAX_KERNEL_FILE: u64 = 64 * 1024;

fn read_small(path: &Path) -> Option<String> {
    crate::fsutil::read_text_limited(path, MAX_KERNEL_FILE).ok()
}

fn read_u64(path: &Path) -> Option<u64> {
    read_small(path)?.trim().parse().ok()
}

/// amdgpu cards under `drm` (normally /sys/class/drm): every `cardN` whose device folder has
/// `gpu_busy_percent` or `mem_info_vram_total` (connectors such as card0-DP-1 are skipped).
pub fn read_amd(drm: &Path) -> Vec<GpuReading> {
    let Ok(dir) = std::fs::read_dir(drm) else { return Vec::new() };
    let mut cards: Vec<(u32, PathBuf)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix("card")?.parse().ok()?;
            Some((n, e.path().join("device")))
        })
        .collect();
    cards.sort();
    cards
        .into_iter()
        .filter_map(|(n, dev)| {
            let busy = read_u64(&dev.join("gpu_busy_percent"));
            let (used, total) = (read_u64(&dev.join("mem_info_vram_used")), read_u64(&dev.join("mem_info_vram_total")));
            (busy.is_some() || total.is_some()).then(|| GpuReading {
                name: format!("amdgpu card{n}"),
                source: format!("{} (gpu_busy_percent, mem_info_vram_used, mem_info_vram_total)", dev.display()),
                busy_percent: busy.map(|b| b.min(100) as f64),
                vram_used: used,
                vram_total: total,
            })
        })
        .collect()
}

/// One DRM client's counters from fdinfo.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrmClient {
    pub driver: String,
    pub pdev: String,
    pub client_id: String,
    /// Busy nanoseconds per engine (i915 style `drm-engine-<e>: N ns`).
    pub engine_ns: BTreeMap<String, u64>,
    /// (cycles, total cycles) per engine (xe style).
    pub engine_cycles: BTreeMap<String, (u64, u64)>,
    /// Resident bytes per memory region (`drm-resident-<region>`).
    pub resident: BTreeMap<String, u64>,
}

/// Parses one fdinfo file; None unless it is a DRM client (has `drm-driver`).
pub fn parse_fdinfo(text: &str) -> Option<DrmClient> {
    let mut c = DrmClient::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        let mut words = value.split_whitespace();
        let number = words.next().and_then(|w| w.parse::<u64>().ok());
        let unit = words.next().unwrap_or("");
        match key.trim() {
            "drm-driver" => c.driver = value.to_string(),
            "drm-pdev" => c.pdev = value.to_string(),
            "drm-client-id" => c.client_id = value.to_string(),
            k => {
                if let (Some(e), Some(n)) = (k.strip_prefix("drm-engine-"), number) {
                    c.engine_ns.insert(e.to_string(), n);
                } else if let (Some(e), Some(n)) = (k.strip_prefix("drm-total-cycles-"), number) {
                    c.engine_cycles.entry(e.to_string()).or_default().1 = n;
                } else if let (Some(e), Some(n)) = (k.strip_prefix("drm-cycles-"), number) {
                    c.engine_cycles.entry(e.to_string()).or_default().0 = n;
                } else if let (Some(r), Some(n)) = (k.strip_prefix("drm-resident-"), number) {
                    let scale = match unit {
                        "KiB" => 1 << 10,
                        "MiB" => 1 << 20,
                        "GiB" => 1 << 30,
                        _ => 1,
                    };
                    c.resident.insert(r.to_string(), n.saturating_mul(scale));
                }
            }
        }
    }
    (!c.driver.is_empty()).then_some(c)
}

/// Every DRM client in an fdinfo folder (normally /proc/self/fdinfo), once per client id (one
/// client can sit behind several duplicated descriptors).
pub fn read_fdinfo(dir: &Path) -> Vec<DrmClient> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<DrmClient> = Vec::new();
    for e in entries.flatten() {
        if let Some(c) = read_small(&e.path()).as_deref().and_then(parse_fdinfo)
            && !out.iter().any(|o| o.client_id == c.client_id && o.pdev == c.pdev)
        {
            out.push(c);
        }
    }
    out.sort_by(|a, b| (&a.pdev, &a.client_id).cmp(&(&b.pdev, &b.client_id)));
    out
}

/// Busy % per engine between two samples of the same client taken `wall_ns` apart: Δns ÷ wall
/// for nanosecond counters, Δcycles ÷ Δtotal cycles for cycle counters. Engines whose counters
/// went backwards (a new client behind the same id) are left out.
pub fn busy_percent(before: &DrmClient, after: &DrmClient, wall_ns: u64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if wall_ns > 0 {
        for (e, &ns) in &after.engine_ns {
            if let Some(d) = before.engine_ns.get(e).and_then(|&b| ns.checked_sub(b)) {
                out.insert(e.clone(), (d as f64 / wall_ns as f64 * 100.0).min(100.0));
            }
        }
    }
    for (e, &(cyc, total)) in &after.engine_cycles {
        if let Some(&(b_cyc, b_total)) = before.engine_cycles.get(e)
            && let (Some(d), Some(dt)) = (cyc.checked_sub(b_cyc), total.checked_sub(b_total))
            && dt > 0
        {
            out.insert(e.clone(), (d as f64 / dt as f64 * 100.0).min(100.0));
        }
    }
    out
}

/// Readings for this process's DRM clients from two fdinfo samples `wall_ns` apart: the
/// busiest engine's % (named in the source) and resident VRAM (regions named vram* or local*).
pub fn fdinfo_readings(dir: &Path, before: &[DrmClient], after: &[DrmClient], wall_ns: u64) -> Vec<GpuReading> {
    after
        .iter()
        .map(|c| {
            let busy = before.iter().find(|b| b.client_id == c.client_id && b.pdev == c.pdev).map(|b| busy_percent(b, c, wall_ns));
            let top = busy.as_ref().and_then(|m| m.iter().max_by(|a, b| a.1.total_cmp(b.1)).map(|(e, &p)| (e.clone(), p)));
            let vram: Vec<u64> =
                c.resident.iter().filter(|(r, _)| r.starts_with("vram") || r.starts_with("local")).map(|(_, &b)| b).collect();
            GpuReading {
                name: format!("{} client {} ({})", c.driver, c.client_id, c.pdev),
                source: format!(
                    "{} (DRM fdinfo, this process only{})",
                    dir.display(),
                    top.as_ref().map(|(e, _)| format!("; busiest engine: {e}")).unwrap_or_default()
                ),
                busy_percent: top.map(|t| t.1),
                vram_used: (!vram.is_empty()).then(|| vram.iter().sum()),
                vram_total: None,
            }
        })
        .collect()
}

/// Two fdinfo samples keep state between calls; monitor.rs's fdinfo source holds one of these.
#[derive(Default)]
pub struct FdinfoSampler {
    last: Option<(std::time::Instant, Vec<DrmClient>)>,
}

impl FdinfoSampler {
    /// This process's DRM clients now, with busy % since the previous call (None the first time).
    pub fn sample(&mut self, dir: &Path) -> Vec<GpuReading> {
        let now = (std::time::Instant::now(), read_fdinfo(dir));
        let out = match &self.last {
            Some((t, before)) => fdinfo_readings(dir, before, &now.1, now.0.duration_since(*t).as_nanos() as u64),
            None => fdinfo_readings(dir, &[], &now.1, 0),
        };
        self.last = Some(now);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn amd_sysfs_cards_are_read_and_connectors_and_other_vendors_skipped() {
        let root = tempfile::tempdir().unwrap();
        let drm = root.path();
        write(&drm.join("card1/device/gpu_busy_percent"), "37\n");
        write(&drm.join("card1/device/mem_info_vram_used"), "1073741824\n");
        write(&drm.join("card1/device/mem_info_vram_total"), "8589934592\n");
        write(&drm.join("card1-DP-1/device/gpu_busy_percent"), "99\n");
        write(&drm.join("card0/device/vendor"), "0x8086\n"); // an Intel card: no amdgpu files
        write(&drm.join("card2/device/gpu_busy_percent"), "garbage\n");
        write(&drm.join("card2/device/mem_info_vram_total"), "100\n");
        // Larger than any sysfs attribute: not read at all (the bounded reader), so no card.
        write(&drm.join("card3/device/gpu_busy_percent"), &format!("42{}\n", " ".repeat(100_000)));
        let r = read_amd(drm);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            (r[0].name.as_str(), r[0].busy_percent, r[0].vram_used, r[0].vram_total),
            ("amdgpu card1", Some(37.0), Some(1 << 30), Some(8 << 30))
        );
        assert!(r[0].source.contains("card1/device"), "{}", r[0].source);
        assert_eq!((r[1].busy_percent, r[1].vram_total), (None, Some(100)), "a malformed file reads as absent");
        assert!(read_amd(&drm.join("missing")).is_empty());
    }

    const I915_A: &str = "pos:\t0\nflags:\t02100002\ndrm-driver:\ti915\ndrm-pdev:\t0000:00:02.0\ndrm-client-id:\t7\ndrm-engine-render:\t1000000 ns\ndrm-engine-copy:\t0 ns\ndrm-engine-video:\t5 ns\ndrm-resident-local0:\t2048 KiB\ndrm-resident-system0:\t4096 KiB\n";
    const I915_B: &str = "drm-driver:\ti915\ndrm-pdev:\t0000:00:02.0\ndrm-client-id:\t7\ndrm-engine-render:\t51000000 ns\ndrm-engine-copy:\t10000000 ns\ndrm-engine-video:\t5 ns\ndrm-resident-local0:\t3 MiB\n";

    #[test]
    fn i915_nanosecond_counters_give_busy_percent_over_wall_time() {
        let (a, b) = (parse_fdinfo(I915_A).unwrap(), parse_fdinfo(I915_B).unwrap());
        assert_eq!(a.engine_ns["render"], 1_000_000);
        assert_eq!(a.resident["local0"], 2 << 20);
        assert_eq!(b.resident["local0"], 3 << 20);
        // 100 ms apart: render 50 ms busy = 50 %, copy 10 %, video idle.
        let p = busy_percent(&a, &b, 100_000_000);
        assert_eq!((p["render"], p["copy"], p["video"]), (50.0, 10.0, 0.0));
        assert!(parse_fdinfo("pos: 0\nflags: 0\n").is_none(), "a non-DRM descriptor is no client");
    }

    #[test]
    fn xe_cycle_counters_give_busy_percent_of_total_cycles() {
        let a = parse_fdinfo("drm-driver: xe\ndrm-client-id: 3\ndrm-cycles-rcs: 100\ndrm-total-cycles-rcs: 1000\ndrm-cycles-bcs: 0\ndrm-total-cycles-bcs: 1000\n").unwrap();
        let b = parse_fdinfo("drm-driver: xe\ndrm-client-id: 3\ndrm-cycles-rcs: 400\ndrm-total-cycles-rcs: 2000\ndrm-cycles-bcs: 0\ndrm-total-cycles-bcs: 1000\n").unwrap();
        let p = busy_percent(&a, &b, 0);
        assert_eq!(p["rcs"], 30.0);
        assert!(!p.contains_key("bcs"), "no elapsed cycles: no figure");
    }

    #[test]
    fn fdinfo_folders_dedupe_clients_and_two_samples_name_the_busiest_engine() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        write(&dir.join("0"), "pos: 0\nflags: 0\n");
        write(&dir.join("5"), I915_A);
        write(&dir.join("6"), I915_A); // a dup'ed descriptor of the same client
        let before = read_fdinfo(dir);
        assert_eq!(before.len(), 1);
        write(&dir.join("5"), I915_B);
        write(&dir.join("6"), I915_B);
        let after = read_fdinfo(dir);
        let r = fdinfo_readings(dir, &before, &after, 100_000_000);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].busy_percent, Some(50.0));
        assert_eq!(r[0].vram_used, Some(3 << 20));
        assert!(r[0].source.contains("busiest engine: render") && r[0].source.contains("this process only"), "{}", r[0].source);
        // The first sample has nothing to compare with.
        assert_eq!(fdinfo_readings(dir, &[], &after, 0)[0].busy_percent, None);
    }
}
