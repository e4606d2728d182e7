//! Exercise 2: one model trained for a fixed budget of epochs at several batch sizes. Memory by
//! category comes from the ledger; a VRAM budget makes a batch that does not fit fail like a
//! real out-of-memory, and the sweep goes on.

mod oom_ladder;
mod report;
mod run;
mod verdict;

use super::common;
use super::settings::batch_sweep::Config;
use super::settings::{self, Settings, Value};
use super::sink::Sink;
use super::{Exercise, Preset};
use gpulab_core::error::Result;
use gpulab_systems::report::Report;

pub struct BatchSweep;

// The categories that show how memory splits; staging/other are tiny bookkeeping.
pub(super) const OOM_RESPONSE: &str = "a smaller batch (batch_sizes), 16-bit training (precision=fp16 or bf16; exercise 3), gradient accumulation over micro-batches (accumulate=N, N dividing the batch), or activation recomputation (recompute=true) — ladder=true tries each on the largest batch that did not fit";

impl Exercise for BatchSweep {
    fn id(&self) -> &'static str {
        "batch-sweep"
    }
    fn number(&self) -> u32 {
        2
    }
    fn title(&self) -> &'static str {
        "Batch-size sweep"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/02-batch-size.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backend", "cpu"), ("dataset", "digits"), ("epochs", "1"), ("batch_sizes", "16,4096"), ("vram_budget_mib", "2")]
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        common::training_live_charts()
    }
    fn settings(&self) -> Settings {
        let s = common::one_backend(Settings::default())
            .add("batch_sizes", "Batch sizes", "The batch sizes to compare", settings::list(&[16, 32, 64, 128], 1, 65536))
            .add(
                "vram_budget_mib",
                "VRAM budget (MiB)",
                "Pretend the device has only this much memory (0 = no limit); a batch that does not fit fails like a real out-of-memory",
                settings::float(0.0, 0.0, 1_000_000.0),
            )
            .add(
                "ladder",
                "Out-of-memory ladder",
                "After the sweep, retry the largest batch that ran out of memory with each remedy: a smaller batch, gradient accumulation, activation recomputation, 16-bit, and all three",
                Value::Bool(false),
            )
            .add(
                "ladder_split",
                "Ladder split",
                "How many times smaller the ladder's smaller batch is, and how many micro-batches its accumulation runs",
                settings::int(8, 2, 1024),
            );
        // `batch` is swept, so its own setting is not shown.
        let s = common::memory_settings(common::precision_setting(common::training_settings(s, "shapes", &[256, 128], 64, 3)));
        let mut s = common::model_setting(s);
        s.0.retain(|x| x.key != "batch");
        super::sizing::settings(s)
    }

    fn presets(&self) -> Vec<Preset> {
        let mut p = super::sizing::presets(
            "The lesson's small model at batch 16 to 128",
            (
                "A 2048-wide MLP on 64×64 colour shapes at batch 32 to 1024: the batch sizes where a GPU's throughput keeps climbing",
                &[("batch_sizes", "32,128,512,1024"), ("epochs", "2")],
            ),
            (
                "The model sized from the backend's measured peak (cached per adapter) so the sweep's training takes about 30 s anywhere",
                &[("batch_sizes", "32,128,512"), ("target_s", "30")],
            ),
        );
        p.push(Preset::new(
            "force an out-of-memory",
            "An 8.5 MiB memory budget (simulated by gpulab's ledger, the same on every backend) and three hidden layers of 256: batch 16 and 256 fit, batch 1024 does not — then the ladder retries it 8× smaller, in 8 accumulated micro-batches, with recomputed activations, in 16 bits, and with all three",
            &[
                ("batch_sizes", "16,256,1024"),
                ("hidden", "256,256,256"),
                ("vram_budget_mib", "8.5"),
                ("epochs", "1"),
                ("ladder", "true"),
                ("ladder_split", "8"),
            ],
        ));
        p
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        run::run(self, s, sink)
    }
}
