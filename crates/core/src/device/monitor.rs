//! One hardware monitor over every telemetry source the driver publishes: NVML (telemetry.rs),
//! amdgpu sysfs and this process's DRM fdinfo (linux_gpu.rs), and a scripted fake for tests.
//! Each source turns its readings into labelled [`Sample`]s; the hardware panel and `gpulab
//! info` read them directly, and a run's [`Monitor`] samples them on a background thread at a
//! fixed interval, keeps a bounded series (thinned when full) and a summary of every reading,
//! and is stopped and joined at the run's end.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::linux_gpu::{self, FdinfoSampler, GpuReading};
use super::telemetry;

/// The sources a probe looks for, in the order it looks.
pub const SOURCE_NAMES: [&str; 3] = [NVML, AMDGPU, FDINFO];
pub const NVML: &str = "NVML";
pub const AMDGPU: &str = "amdgpu sysfs";
pub const FDINFO: &str = "DRM fdinfo";

/// One device's figures from one source at one moment, as the driver reports them. Every
/// figure is optional: each source publishes a different subset.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Sample {
    /// The source's name ("NVML", "amdgpu sysfs", "DRM fdinfo", or a fake's).
    pub source: String,
    /// The device as the source names it ("NVIDIA H200", "amdgpu card1", "i915 client 7 (…)").
    pub device: String,
    /// Where exactly the figures were read (a library, files), for the panel and `gpulab info`.
    pub origin: String,
    /// Busy / utilisation, percent.
    pub utilisation: Option<f64>,
    /// Memory in use as the driver counts it, bytes.
    pub memory_used: Option<u64>,
    pub memory_total: Option<u64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
}

impl Sample {
    /// A sample with every figure (a fake source's script, tests); the source is the fake's.
    pub fn of(device: &str, utilisation: f64, memory_used: u64, temperature_c: f64, power_w: f64) -> Sample {
        Sample {
            device: device.into(),
            utilisation: Some(utilisation),
            memory_used: Some(memory_used),
            temperature_c: Some(temperature_c),
            power_w: Some(power_w),
            ..Default::default()
        }
    }

    /// "utilisation 37% · memory 1.0 of 8.0 GiB · temperature 50 °C · power 100.0 W", the
    /// figures this source gave ("n/a" for the others).
    pub fn describe(&self) -> String {
        let gib = |b: u64| format!("{:.1}", b as f64 / (1u64 << 30) as f64);
        let memory = match (self.memory_used, self.memory_total) {
            (Some(u), Some(t)) => format!("{} of {} GiB", gib(u), gib(t)),
            (Some(u), None) => format!("{} GiB", gib(u)),
            _ => "n/a".into(),
        };
        let na = |v: Option<String>| v.unwrap_or_else(|| "n/a".into());
        format!(
            "utilisation {} · memory {memory} · temperature {} · power {}",
            na(self.utilisation.map(|u| format!("{u:.0}%"))),
            na(self.temperature_c.map(|t| format!("{t:.0} °C"))),
            na(self.power_w.map(|p| format!("{p:.1} W")))
        )
    }
}

/// A telemetry source: one reader, shared by the panel, `gpulab info` and the run monitor.
pub trait Source: Send {
    fn name(&self) -> &str;
    /// The devices' figures now (empty when the source has nothing to say this time).
    fn read(&mut self) -> Vec<Sample>;
    /// Why the source gave no reading during a whole run.
    fn why_silent(&self) -> String {
        "gave no reading during the run".into()
    }
}

/// A source that was looked for and is not there, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Missing {
    pub source: String,
    pub why: String,
}

/// What a probe found: the sources to read and the ones that are absent.
#[derive(Default)]
pub struct Probe {
    pub sources: Vec<Box<dyn Source>>,
    pub missing: Vec<Missing>,
}

impl Probe {
    /// Reads every source once.
    pub fn read_all(&mut self) -> Vec<Sample> {
        self.sources.iter_mut().flat_map(|s| s.read()).collect()
    }
}

/// Looks for every source on this machine: NVML (the NVIDIA driver's library), amdgpu cards
/// under /sys/class/drm, and this process's DRM file descriptors under /proc/self/fdinfo.
pub fn probe() -> Probe {
    let mut p = Probe::default();
    match nvml_wrapper::Nvml::init() {
        Ok(nvml) => p.sources.push(Box::new(NvmlSource { nvml, only: None })),
        Err(e) => p.missing.push(Missing { source: NVML.into(), why: format!("the NVIDIA driver's library did not load: {e}") }),
    }
    let drm = Path::new("/sys/class/drm");
    if linux_gpu::read_amd(drm).is_empty() {
        p.missing.push(Missing { source: AMDGPU.into(), why: format!("no amdgpu card under {}", drm.display()) });
    } else {
        p.sources.push(Box::new(AmdSysfsSource::new(drm)));
    }
    let fdinfo = Path::new("/proc/self/fdinfo");
    if fdinfo.is_dir() {
        p.sources.push(Box::new(FdinfoSource::new(fdinfo)));
    } else {
        p.missing.push(Missing { source: FDINFO.into(), why: format!("{} does not exist on this system", fdinfo.display()) });
    }
    p
}

static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether this machine may give driver telemetry at all: NVML loads, an amdgpu card exists, or
/// a DRM device node exists for this process to open (fdinfo). Cheap after the first call; the
/// first may take a while (loading NVML): never on a UI thread (`telemetry_known` there).
pub fn may_have_telemetry() -> bool {
    *FOUND.get_or_init(|| {
        let p = probe();
        p.sources.iter().any(|s| s.name() != FDINFO) || std::fs::read_dir("/dev/dri").is_ok_and(|mut d| d.next().is_some())
    })
}

/// `may_have_telemetry`'s answer once some thread has found it; None before, without waiting.
pub fn telemetry_known() -> Option<bool> {
    FOUND.get().copied()
}

/// NVIDIA GPUs through NVML: utilisation, memory, temperature and power.
pub struct NvmlSource {
    nvml: nvml_wrapper::Nvml,
    /// Only the GPU whose name matches this (lower case), when set.
    only: Option<String>,
}

impl NvmlSource {
    /// NVML's GPU named like `adapter` (either name containing the other), or None without NVML
    /// or without such a GPU.
    pub fn matching(adapter: &str) -> Option<Self> {
        let nvml = telemetry::init()?;
        let wanted = adapter.to_lowercase();
        telemetry::read(&nvml).iter().any(|g| names_match(&g.name, &wanted)).then_some(NvmlSource { nvml, only: Some(wanted) })
    }
}

/// Whether a driver's GPU `name` is the adapter named `wanted_lower` (lower case): either name
/// containing the other.
pub fn names_match(name: &str, wanted_lower: &str) -> bool {
    let n = name.to_lowercase();
    wanted_lower.contains(&n) || n.contains(wanted_lower)
}

impl Source for NvmlSource {
    fn name(&self) -> &str {
        NVML
    }
    fn read(&mut self) -> Vec<Sample> {
        telemetry::read(&self.nvml)
            .into_iter()
            .filter(|g| self.only.as_ref().is_none_or(|w| names_match(&g.name, w)))
            .map(|g| Sample {
                source: NVML.into(),
                device: g.name,
                origin: "NVML (the NVIDIA driver)".into(),
                utilisation: g.utilization.map(f64::from),
                memory_used: g.memory_used,
                memory_total: g.memory_total,
                temperature_c: g.temperature.map(f64::from),
                power_w: g.power_mw.map(|p| p as f64 / 1000.0),
            })
            .collect()
    }
}

fn from_reading(source: &str, g: GpuReading) -> Sample {
    Sample {
        source: source.into(),
        device: g.name,
        origin: g.source,
        utilisation: g.busy_percent,
        memory_used: g.vram_used,
        memory_total: g.vram_total,
        temperature_c: None,
        power_w: None,
    }
}

/// amdgpu cards: the driver's busy % and VRAM from sysfs.
pub struct AmdSysfsSource {
    drm: PathBuf,
}

impl AmdSysfsSource {
    /// Cards under `drm` (normally /sys/class/drm).
    pub fn new(drm: &Path) -> Self {
        AmdSysfsSource { drm: drm.to_path_buf() }
    }
}

impl Source for AmdSysfsSource {
    fn name(&self) -> &str {
        AMDGPU
    }
    fn read(&mut self) -> Vec<Sample> {
        linux_gpu::read_amd(&self.drm).into_iter().map(|g| from_reading(AMDGPU, g)).collect()
    }
    fn why_silent(&self) -> String {
        format!("no amdgpu card under {}", self.drm.display())
    }
}

/// This process's DRM clients (Intel i915/xe and any driver with fdinfo): busy % between two
/// reads, resident VRAM.
pub struct FdinfoSource {
    dir: PathBuf,
    sampler: FdinfoSampler,
}

impl FdinfoSource {
    /// Clients under `dir` (normally /proc/self/fdinfo).
    pub fn new(dir: &Path) -> Self {
        FdinfoSource { dir: dir.to_path_buf(), sampler: FdinfoSampler::default() }
    }
}

impl Source for FdinfoSource {
    fn name(&self) -> &str {
        FDINFO
    }
    fn read(&mut self) -> Vec<Sample> {
        self.sampler.sample(&self.dir).into_iter().map(|g| from_reading(FDINFO, g)).collect()
    }
    fn why_silent(&self) -> String {
        format!(
            "this process held no DRM device in {}; a software adapter such as llvmpipe opens none, and a child process's use is not seen",
            self.dir.display()
        )
    }
}

/// A scripted source for tests: each read returns the next batch of samples, then nothing.
pub struct FakeSource {
    name: String,
    script: std::collections::VecDeque<Vec<Sample>>,
}

impl FakeSource {
    /// Samples labelled with `name` as their source, one batch per read.
    pub fn new(name: &str, script: Vec<Vec<Sample>>) -> Self {
        let script = script.into_iter().map(|b| b.into_iter().map(|s| Sample { source: name.into(), ..s }).collect()).collect();
        FakeSource { name: name.into(), script }
    }
}

impl Source for FakeSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn read(&mut self) -> Vec<Sample> {
        self.script.pop_front().unwrap_or_default()
    }
}

/// A sample and when it was read, seconds since the monitor started.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamped {
    pub t_s: f64,
    pub sample: Sample,
}

/// One device of one source over a whole run, from every reading (not only the kept ones).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub source: String,
    pub device: String,
    /// Readings taken.
    pub samples: usize,
    pub utilisation_mean: Option<f64>,
    pub utilisation_max: Option<f64>,
    pub memory_peak: Option<u64>,
    pub temperature_max: Option<f64>,
    pub power_mean: Option<f64>,
    util_sum: f64,
    util_n: usize,
    power_sum: f64,
    power_n: usize,
}

impl Summary {
    fn add(&mut self, s: &Sample) {
        self.samples += 1;
        if let Some(u) = s.utilisation.filter(|u| u.is_finite()) {
            self.util_sum += u;
            self.util_n += 1;
            self.utilisation_mean = Some(self.util_sum / self.util_n as f64);
            self.utilisation_max = Some(self.utilisation_max.map_or(u, |m| m.max(u)));
        }
        if let Some(m) = s.memory_used {
            self.memory_peak = Some(self.memory_peak.map_or(m, |p| p.max(m)));
        }
        if let Some(t) = s.temperature_c.filter(|t| t.is_finite()) {
            self.temperature_max = Some(self.temperature_max.map_or(t, |m| m.max(t)));
        }
        if let Some(p) = s.power_w.filter(|p| p.is_finite()) {
            self.power_sum += p;
            self.power_n += 1;
            self.power_mean = Some(self.power_sum / self.power_n as f64);
        }
    }
}

/// The run's record: a bounded series (every sample while it fits; then every other one is
/// dropped and the interval doubles, so the kept series stays evenly spaced over the run) and a
/// summary per device from every reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    pub series: Vec<Stamped>,
    pub summaries: Vec<Summary>,
    /// The interval between kept readings at the end, seconds (grows as the series is thinned).
    pub interval_s: f64,
    /// At most this many samples are kept.
    pub keep: usize,
    /// The sources that were read (in the probe's order).
    pub sources: Vec<String>,
    /// Sources that were absent, and those read that never gave a sample, with why.
    pub missing: Vec<Missing>,
}

impl Recording {
    pub fn new(interval_s: f64, keep: usize) -> Self {
        Recording { interval_s, keep: keep.max(2), ..Default::default() }
    }

    /// Adds one reading's samples taken at `t_s`: always to the summaries; to the series unless
    /// it comes sooner than the interval after the last kept one (after thinning, every other
    /// reading waits).
    pub fn push(&mut self, t_s: f64, samples: &[Sample]) {
        self.push_inner(t_s, samples, false)
    }

    /// The run's last reading: kept in the series however soon it came.
    pub fn push_last(&mut self, t_s: f64, samples: &[Sample]) {
        self.push_inner(t_s, samples, true)
    }

    fn push_inner(&mut self, t_s: f64, samples: &[Sample], last_reading: bool) {
        for s in samples {
            match self.summaries.iter_mut().find(|x| x.source == s.source && x.device == s.device) {
                Some(x) => x.add(s),
                None => {
                    let mut x = Summary { source: s.source.clone(), device: s.device.clone(), ..Default::default() };
                    x.add(s);
                    self.summaries.push(x);
                }
            }
        }
        let last = self.series.last().map(|s| s.t_s);
        let too_soon = last.is_some_and(|l| t_s - l < self.interval_s * (1.0 - 1e-9));
        if samples.is_empty() || (too_soon && !last_reading) {
            return;
        }
        self.series.extend(samples.iter().map(|s| Stamped { t_s, sample: s.clone() }));
        while self.series.len() > self.keep {
            self.thin();
        }
    }

    /// Drops every other reading time (all samples of one reading go together).
    fn thin(&mut self) {
        let mut times: Vec<f64> = self.series.iter().map(|s| s.t_s).collect();
        times.dedup();
        let kept: Vec<f64> = times.iter().step_by(2).copied().collect();
        self.series.retain(|s| kept.contains(&s.t_s));
        self.interval_s *= 2.0;
        if kept.len() == times.len() {
            // One reading alone is over the bound: keep its first `keep` samples.
            self.series.truncate(self.keep);
        }
    }

    /// Whether anything was recorded.
    pub fn is_empty(&self) -> bool {
        self.summaries.is_empty()
    }
}

/// Samples every source of a probe on a background thread, every `interval`, from `start` to
/// `finish` (which stops and joins it). The first reading is taken at once and a last one at the
/// end, so even a short run has two.
pub struct Monitor {
    stop: Sender<()>,
    live: Receiver<Stamped>,
    handle: JoinHandle<(Recording, Vec<Box<dyn Source>>)>,
    missing: Vec<Missing>,
    /// The clock every `Stamped::t_s` counts from.
    t0: Instant,
}

impl Monitor {
    /// Starts sampling `probe`'s sources; at most `keep` samples are kept (see `Recording`).
    pub fn start(probe: Probe, interval: Duration, keep: usize) -> std::io::Result<Monitor> {
        let Probe { mut sources, missing } = probe;
        let (stop, stopped) = mpsc::channel::<()>();
        // The live feed is bounded too: whoever draws it may fall behind; then points are dropped.
        let (tx, live) = mpsc::sync_channel::<Stamped>(keep.max(16));
        let mut rec = Recording::new(interval.as_secs_f64(), keep);
        rec.sources = sources.iter().map(|s| s.name().to_string()).collect();
        let t0 = Instant::now();
        let handle = std::thread::Builder::new().name("gpulab-monitor".into()).spawn(move || {
            loop {
                read_into(&mut sources, &mut rec, t0, &tx);
                match stopped.recv_timeout(Duration::from_secs_f64(rec.interval_s.max(interval.as_secs_f64()))) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
            let t_s = t0.elapsed().as_secs_f64();
            let samples: Vec<Sample> = sources.iter_mut().flat_map(|s| s.read()).collect();
            rec.push_last(t_s, &samples);
            (rec, sources)
        })?;
        Ok(Monitor { stop, live, handle, missing, t0 })
    }

    /// Now, in the seconds `Stamped::t_s` counts.
    pub fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The samples read since the last call (for a live chart).
    pub fn take_new(&self) -> Vec<Stamped> {
        self.live.try_iter().collect()
    }

    /// Stops the thread and returns the record; sources that never gave a sample are listed as
    /// missing with their reason, after the ones the probe did not find.
    pub fn finish(self) -> Recording {
        let _ = self.stop.send(());
        let (mut rec, sources) = self.handle.join().unwrap_or_else(|_| (Recording::default(), Vec::new()));
        let mut missing = self.missing;
        for s in &sources {
            if !rec.summaries.iter().any(|x| x.source == s.name()) {
                missing.push(Missing { source: s.name().to_string(), why: s.why_silent() });
            }
        }
        missing.sort_by_key(|m| SOURCE_NAMES.iter().position(|n| *n == m.source).unwrap_or(SOURCE_NAMES.len()));
        rec.missing = missing;
        rec
    }
}

fn read_into(sources: &mut [Box<dyn Source>], rec: &mut Recording, t0: Instant, live: &SyncSender<Stamped>) {
    let t_s = t0.elapsed().as_secs_f64();
    let samples: Vec<Sample> = sources.iter_mut().flat_map(|s| s.read()).collect();
    for s in &samples {
        let _ = live.try_send(Stamped { t_s, sample: s.clone() });
    }
    rec.push(t_s, &samples);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_cover_every_reading_per_device_and_skip_absent_figures() {
        let mut r = Recording::new(0.25, 100);
        let a = |u, m, t, p| Sample { source: "fake".into(), ..Sample::of("gpu0", u, m, t, p) };
        r.push(0.0, &[a(10.0, 100, 40.0, 50.0), Sample { source: "fake".into(), device: "gpu1".into(), ..Default::default() }]);
        r.push(0.25, &[a(30.0, 300, 55.0, 150.0)]);
        r.push(0.5, &[Sample { utilisation: None, power_w: None, ..a(0.0, 200, 45.0, 0.0) }]);
        assert_eq!(r.summaries.len(), 2);
        let s = &r.summaries[0];
        assert_eq!((s.samples, s.utilisation_mean, s.utilisation_max), (3, Some(20.0), Some(30.0)));
        assert_eq!((s.memory_peak, s.temperature_max, s.power_mean), (Some(300), Some(55.0), Some(100.0)));
        let empty = &r.summaries[1];
        assert_eq!((empty.samples, empty.utilisation_mean, empty.memory_peak, empty.power_mean), (1, None, None, None));
        assert_eq!(r.series.len(), 4);
    }

    #[test]
    fn the_series_is_thinned_evenly_and_stays_bounded() {
        let mut r = Recording::new(1.0, 8);
        for i in 0..100 {
            r.push(i as f64, &[Sample::of("g", i as f64, 0, 0.0, 0.0), Sample::of("h", 0.0, 0, 0.0, 0.0)]);
            assert!(r.series.len() <= 8, "{} kept at reading {i}", r.series.len());
        }
        let times: Vec<f64> = r.series.iter().map(|s| s.t_s).collect();
        let gaps: Vec<f64> = times.windows(2).filter(|w| w[1] > w[0]).map(|w| w[1] - w[0]).collect();
        assert!(gaps.windows(2).all(|g| g[0] == g[1]), "evenly spaced: {times:?}");
        assert_eq!(times[0], 0.0, "the first reading stays");
        assert!(*times.last().unwrap() >= 64.0, "the series still reaches late in the run: {times:?}");
        assert_eq!(r.interval_s, gaps[0]);
        // Every reading counts in the summary, kept or not.
        assert_eq!(r.summaries[0].samples, 100);
        assert_eq!(r.summaries[0].utilisation_max, Some(99.0));
        // The run's last reading is kept however soon after the last kept one it came.
        r.push(99.5, &[Sample::of("g", 1.0, 0, 0.0, 0.0)]);
        assert!(r.series.iter().all(|s| s.t_s != 99.5), "a reading before the interval waits");
        r.push_last(99.6, &[Sample::of("g", 1.0, 0, 0.0, 0.0)]);
        assert_eq!(r.series.last().map(|s| s.t_s), Some(99.6));
        assert!(r.series.len() <= 8);
    }

    #[test]
    fn a_monitor_records_a_fake_source_and_names_the_silent_ones() {
        let script = vec![vec![Sample::of("gpu0", 20.0, 1 << 30, 50.0, 100.0)], vec![Sample::of("gpu0", 60.0, 3 << 30, 70.0, 200.0)]];
        let drm = tempfile::tempdir().unwrap();
        let probe = Probe {
            sources: vec![Box::new(FakeSource::new("fake", script)), Box::new(AmdSysfsSource::new(drm.path()))],
            missing: vec![Missing { source: NVML.into(), why: "no library".into() }],
        };
        let m = Monitor::start(probe, Duration::from_millis(5), 64).unwrap();
        let rec = m.finish();
        // The first reading at the start and the last at the finish: both scripted batches.
        let s = &rec.summaries[0];
        assert_eq!((s.source.as_str(), s.device.as_str(), s.samples), ("fake", "gpu0", 2));
        assert_eq!((s.utilisation_mean, s.utilisation_max, s.memory_peak), (Some(40.0), Some(60.0), Some(3 << 30)));
        assert_eq!((s.temperature_max, s.power_mean), (Some(70.0), Some(150.0)));
        assert_eq!(rec.sources, ["fake", AMDGPU]);
        let missing: Vec<&str> = rec.missing.iter().map(|m| m.source.as_str()).collect();
        assert_eq!(missing, [NVML, AMDGPU]);
        assert!(rec.missing[1].why.contains("no amdgpu card"), "{:?}", rec.missing);
    }
}
