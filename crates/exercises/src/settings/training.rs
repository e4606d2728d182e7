//! The training settings the exercises share (`common::training_settings` and the optional
//! model, precision, memory and `size` settings), read once into `Training`.

use super::Settings;
use crate::sizing::{SIZE, TARGET};
use gpulab_core::error::{Error, Result};
use gpulab_systems::data::{self, Dataset, DatasetSpec};
use gpulab_systems::nn::{AmpConfig, ModelKind, OptimizerKind, Precision};
use gpulab_systems::train::TrainConfig;

/// The shared training settings as set; the optional ones are `None` where the exercise does
/// not declare them.
#[derive(Clone, Debug, PartialEq)]
pub struct Training {
    pub dataset: String,
    pub hidden: Vec<u64>,
    /// `None` where the batch is swept instead (exercise 2).
    batch: Option<i64>,
    pub epochs: i64,
    pub lr: f64,
    pub optimizer: String,
    pub seed: i64,
    pub log_every: i64,
    pub model: Option<String>,
    pub precision: Option<String>,
    pub accumulate: Option<i64>,
    pub recompute: Option<bool>,
    /// `size` and `target_s`, where the exercise has them.
    pub size: Option<(String, f64)>,
}

impl Training {
    pub fn parse(s: &Settings) -> Result<Training> {
        let opt = |key: &str| s.get(key).is_some();
        Ok(Training {
            dataset: s.text("dataset")?,
            hidden: s.list("hidden")?,
            batch: if opt("batch") { Some(s.int("batch")?) } else { None },
            epochs: s.int("epochs")?,
            lr: s.float("lr")?,
            optimizer: s.choice("optimizer")?,
            seed: s.int("seed")?,
            log_every: s.int("log_every")?,
            model: if opt("model") { Some(s.choice("model")?) } else { None },
            precision: if opt("precision") { Some(s.choice("precision")?) } else { None },
            accumulate: if opt("accumulate") { Some(s.int("accumulate")?) } else { None },
            recompute: if opt("recompute") { Some(s.bool("recompute")?) } else { None },
            size: if opt(SIZE) { Some((s.choice(SIZE)?, s.float(TARGET)?)) } else { None },
        })
    }

    /// The `batch` setting (every training exercise but the batch sweep has one).
    pub fn batch(&self) -> Result<usize> {
        self.batch.map(|b| b as usize).ok_or_else(|| Error::InvalidConfig("batch: no such setting".into()))
    }

    /// The precision the settings ask for: their "precision" setting, or fp32 where there is none.
    pub fn amp_config(&self) -> Result<AmpConfig> {
        match &self.precision {
            Some(p) => Ok(AmpConfig::new(p.parse::<Precision>()?)),
            None => Ok(AmpConfig::default()),
        }
    }

    /// The model the settings ask for: their "model" setting, or the MLP where there is none.
    pub fn model_kind(&self) -> Result<ModelKind> {
        match &self.model {
            Some(m) => m.parse(),
            None => Ok(ModelKind::Mlp),
        }
    }

    /// The model the settings build for `data`, spelled out ("CNN 1x8x8 conv3x3 16-pool-…-10"
    /// or "64-128-64-10"): the report's metadata names what trained.
    pub fn architecture(&self, data: &Dataset) -> Result<String> {
        let hidden: Vec<usize> = self.hidden.iter().map(|&v| v as usize).collect();
        Ok(self.model_kind()?.config(data.shape, data.features, &hidden, data.classes)?.describe())
    }

    pub fn dataset_spec(&self) -> Result<DatasetSpec> {
        Ok(self.dataset.parse::<DatasetSpec>()?)
    }

    pub fn load_dataset(&self) -> Result<Dataset> {
        Ok(data::load(&self.dataset_spec()?, self.seed as u64)?)
    }

    /// The training config, with `batch` overriding the setting.
    pub fn train_config(&self, batch: usize) -> Result<TrainConfig> {
        let optimizer: OptimizerKind = self.optimizer.parse()?;
        let cfg = TrainConfig {
            hidden: self.hidden.iter().map(|&v| v as usize).collect(),
            batch,
            epochs: self.epochs as usize,
            // AdamW wants a far smaller step than SGD; the learner sets it explicitly.
            lr: self.lr as f32,
            optimizer,
            momentum: 0.9,
            weight_decay: 0.0,
            seed: self.seed as u64,
            log_every: self.log_every as usize,
            amp: self.amp_config()?,
            model: self.model_kind()?,
            accumulate: self.accumulate.map_or(1, |a| a as usize),
            recompute: self.recompute.unwrap_or(false),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The checks the training exercises share: the data spec parses, the config is sane, and a
    /// CNN fits the data set's images where they are known before loading.
    pub fn validate(&self) -> Result<()> {
        let spec = self.dataset_spec()?;
        let cfg = self.train_config(self.batch()?)?;
        if let Some(image) = spec.image_shape() {
            cfg.model.config(image, image.iter().product(), &cfg.hidden, 2)?;
        }
        Ok(())
    }
}

/// What a `size=auto` run trained, from its report's settings (which hold the chosen model):
/// (hidden widths, epochs). None for a run sized as set. The lab shows it beside the declared
/// widths, which the run replaced.
pub fn trained(config: &std::collections::BTreeMap<String, String>) -> Option<(&str, &str)> {
    if config.get(SIZE).map(String::as_str) != Some("auto") || config.get("model").is_some_and(|m| m != "mlp") {
        return None;
    }
    Some((config.get("hidden")?.as_str(), config.get("epochs").map_or("", String::as_str)))
}
