//! A profiled training run: batches from the multi-threaded loader, CPU spans for every stage on
//! every thread, GPU kernel times from timestamp queries placed on the same clock, and the
//! verdict. Exercises 4 and 7 are built on it.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::peaks::Peaks;
use super::verdict::{Diagnosis, diagnose};
use crate::data::{CacheStats, CostlySource, Dataset, Loader, LoaderConfig, SourceCost};
use crate::train::{Feed, TrainConfig, TrainReport, TrainSink, train_fed};
use gpulab_core::device::gpu::{GpuBackend, KernelTime};
use gpulab_core::device::{Engine, registry};
use gpulab_core::error::{Error, Result};
use gpulab_core::spans::{GPU, MAIN, Span, SpanRecorder, Timeline, stage};
use gpulab_core::tensor::{Backend, DType, MemCategory, TensorMeta};
use gpulab_core::with_backend;

/// The loader's knobs and the source's cost.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineConfig {
    pub num_workers: usize,
    pub prefetch_factor: usize,
    pub cache: bool,
    /// Write batches straight into persistent input buffers (`queue.write_buffer`) rather than
    /// into a fresh buffer per batch that is then copied on the device.
    pub pin_memory: bool,
    pub cost: SourceCost,
}

impl PipelineConfig {
    pub fn describe(&self) -> String {
        format!(
            "{} worker{}, prefetch {}, cache {}, pin_memory {}",
            self.num_workers,
            if self.num_workers == 1 { "" } else { "s" },
            self.prefetch_factor,
            if self.cache { "on" } else { "off" },
            if self.pin_memory { "on" } else { "off" }
        )
    }
}

/// Per-step times on the training thread, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTimes {
    pub data_wait_s: f64,
    pub upload_s: f64,
    /// Recording, submitting and waiting for the step's kernels.
    pub compute_s: f64,
}

pub struct ProfiledRun {
    pub label: String,
    pub pipeline: PipelineConfig,
    pub train: TrainReport,
    pub timeline: Timeline,
    pub steps: Vec<StageTimes>,
    pub cache: CacheStats,
    pub diagnosis: Diagnosis,
}

impl ProfiledRun {
    /// GPU lane busy over the training thread's span of time; None without kernel times.
    pub fn gpu_busy_fraction(&self) -> Option<f64> {
        let a = &self.diagnosis.analysis;
        a.gpu_busy_s.map(|b| b / a.wall_s.max(1e-12))
    }
    pub fn mean_data_wait_s(&self) -> f64 {
        self.steps.iter().map(|s| s.data_wait_s).sum::<f64>() / self.steps.len().max(1) as f64
    }
}

/// Batches from the loader; stage spans to the recorder; a wait for the device after each step.
struct LoaderFeed {
    data: Arc<Dataset>,
    loader: Loader,
    spans: SpanRecorder,
    pin_memory: bool,
    steps: Vec<StageTimes>,
}

impl<B: Backend> Feed<B> for LoaderFeed {
    fn batch(&mut self, _data: &Dataset, epoch: usize, idx: &[u32], xb: &mut Vec<f32>, yb: &mut Vec<u32>) -> Result<()> {
        let b = self
            .loader
            .next_batch()
            .ok_or_else(|| Error::Internal("the loader ran out of batches before the training loop did".into()))??;
        if b.epoch != epoch || b.indices != idx {
            return Err(Error::Internal(format!(
                "the loader's batch {} of epoch {} is not the one the training loop expected",
                b.index, b.epoch
            )));
        }
        *xb = b.x;
        *yb = b.y;
        Ok(())
    }

    fn upload(&mut self, b: &mut B, x: &mut B::Tensor, y: &mut B::Tensor, xb: &[f32], yb: &[u32]) -> Result<()> {
        if self.pin_memory {
            b.write_f32(x, xb)?;
        } else {
            // A fresh buffer per batch, then a device-side copy into the model's input: the
            // extra hop pageable (unpinned) memory takes.
            let fresh = if x.dtype() == DType::F32 {
                b.upload_f32(xb, x.shape(), MemCategory::Staging)?
            } else {
                // A 16-bit input (mixed precision): the host rounds while writing.
                let mut t = b.zeros(x.shape(), x.dtype(), MemCategory::Staging)?;
                b.write_f32(&mut t, xb)?;
                t
            };
            b.copy(&fresh, x)?;
        }
        b.write_u32(y, yb)
    }

    fn span(&mut self, name: &'static str, start: Instant, end: Instant) {
        self.spans.record(MAIN, name, start, end);
        let d = end.saturating_duration_since(start).as_secs_f64();
        if name == stage::DATA_WAIT {
            self.steps.push(StageTimes::default());
        }
        if let Some(s) = self.steps.last_mut() {
            match name {
                stage::DATA_WAIT => s.data_wait_s += d,
                stage::UPLOAD => s.upload_s += d,
                stage::RECORD | stage::SUBMIT | stage::WAIT => s.compute_s += d,
                _ => {}
            }
        }
    }

    fn sync_each_step(&self) -> bool {
        true
    }
}

/// Trains with the profiler on. `peaks` (the adapter's measured roofs) feed the verdict.
pub fn profile_training(
    engine: &mut Engine,
    data: Arc<Dataset>,
    cfg: &TrainConfig,
    pipe: &PipelineConfig,
    label: &str,
    peaks: Option<&Peaks>,
    sink: &mut dyn TrainSink,
) -> Result<ProfiledRun> {
    if let Some(g) = engine.as_gpu_mut() {
        return profile_on_gpu(g, data, cfg, pipe, label, peaks, sink);
    }
    // No per-kernel times on this backend: the registry says why, in the run's note.
    let note = registry::spec(engine.kind()).no_kernel_times;
    with_backend!(engine, b => profiled(data, cfg, pipe, label, peaks, |feed| {
        let data = feed.data.clone();
        let r = train_fed(b, &data, cfg, sink, feed)?;
        Ok((r, Vec::new(), note.to_string()))
    }))
}

/// `profile_training` on a GPU backend: every kernel timed where the adapter has timestamps.
pub fn profile_on_gpu(
    g: &mut GpuBackend,
    data: Arc<Dataset>,
    cfg: &TrainConfig,
    pipe: &PipelineConfig,
    label: &str,
    peaks: Option<&Peaks>,
    sink: &mut dyn TrainSink,
) -> Result<ProfiledRun> {
    profiled(data, cfg, pipe, label, peaks, |feed| {
        let on = g.start_kernel_profiling()?;
        let data = feed.data.clone();
        let r = train_fed(g, &data, cfg, sink, feed);
        let k = g.stop_kernel_profiling();
        let note = if on {
            "Kernel times measured with GPU timestamp queries (wgpu-profiler, one timestamped pass per kernel); placed on the CPU clock so that no kernel starts before its submit (derived).".to_string()
        } else {
            format!("{} has no timestamp queries: the GPU lane is empty; the CPU spans still show where the time went.", g.summary().name)
        };
        Ok((r?, k?, note))
    })
}

type Trained = (TrainReport, Vec<KernelTime>, String);

/// Builds the loader feed, runs `train` with it, and assembles the timeline and verdict.
fn profiled(
    data: Arc<Dataset>,
    cfg: &TrainConfig,
    pipe: &PipelineConfig,
    label: &str,
    peaks: Option<&Peaks>,
    train: impl FnOnce(&mut LoaderFeed) -> Result<Trained>,
) -> Result<ProfiledRun> {
    let spans = SpanRecorder::new();
    let source = Arc::new(CostlySource::new(data.clone(), pipe.cost)?);
    let lcfg = LoaderConfig {
        batch: cfg.batch.min(data.train_len()).max(1),
        num_workers: pipe.num_workers,
        prefetch_factor: pipe.prefetch_factor,
        cache: pipe.cache,
        seed: cfg.seed,
        epochs: cfg.epochs,
    };
    let loader = Loader::new(source, lcfg, Some(spans.clone()))?;
    let mut feed = LoaderFeed { data, loader, spans: spans.clone(), pin_memory: pipe.pin_memory, steps: Vec::new() };
    let (train, kernels, gpu_note) = train(&mut feed)?;
    let cache = feed.loader.cache_stats();
    drop(feed.loader); // joins the workers before the spans are read
    let mut all = spans.snapshot();
    all.extend(place_kernels(&all, &kernels, &spans));
    let timeline = Timeline::new(label, all, gpu_note);
    let diagnosis = diagnose(&timeline, peaks);
    Ok(ProfiledRun { label: label.into(), pipeline: *pipe, train, timeline, steps: feed.steps, cache, diagnosis })
}

/// GPU spans for the kernels submitted during training steps (warm-up and validation dropped),
/// shifted from the GPU clock to the recorder's: by the largest (submit − first kernel start)
/// over the submits, the tightest shift that puts no kernel before its submit.
fn place_kernels(cpu: &[Span], kernels: &[KernelTime], rec: &SpanRecorder) -> Vec<Span> {
    let submits: Vec<(f64, f64)> = cpu.iter().filter(|s| s.lane == MAIN && s.name == stage::SUBMIT).map(|s| (s.start_s, s.end_s)).collect();
    let in_step = |k: &&KernelTime| {
        let t = rec.at(k.submitted);
        submits.iter().any(|(a, b)| t >= *a && t <= *b)
    };
    let kept: Vec<&KernelTime> = kernels.iter().filter(in_step).collect();
    let offset = kept.iter().map(|k| rec.at(k.submitted) - k.start_s).fold(f64::NEG_INFINITY, f64::max);
    if !offset.is_finite() {
        return Vec::new();
    }
    kept.iter()
        .map(|k| Span {
            lane: GPU.into(),
            name: k.name.clone(),
            start_s: k.start_s + offset,
            end_s: k.end_s + offset,
            flops: Some(k.flops),
            bytes: Some(k.bytes),
        })
        .collect()
}
