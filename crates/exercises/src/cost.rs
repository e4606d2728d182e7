//! Cost from measured time: the chapter's cost model, "cost = runtime × hourly price". The time
//! is measured in the run; the hourly price is an assumption the learner sets (`price_per_hour`):
//! a number of US dollars, or one of a few named list prices below, each with its source and
//! date. A cost is therefore derived, never measured, and every figure and column says from
//! which price.

use super::settings::{Settings, Value};
use gpulab_core::error::{Error, Result};
use gpulab_systems::report::{Cell, Column, Provenance, Table};

/// One named list price: what an hour of a cloud GPU (or CPU machine) cost on a public price
/// page at `AS_OF`. Prices change and differ by region, commitment and provider: these are
/// starting assumptions to be replaced by your own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListPrice {
    pub name: &'static str,
    pub usd_per_hour: f64,
    /// "GPU-hour", "machine-hour" or "vCPU-hour".
    pub per: &'static str,
    pub source: &'static str,
}

/// When the list prices below were read.
pub const AS_OF: &str = "2024-06";

/// AWS on-demand Linux prices, us-east-1; a multi-GPU instance's price divided by its GPUs.
pub const LIST_PRICES: [ListPrice; 8] = [
    ListPrice { name: "t4", usd_per_hour: 0.526, per: "GPU-hour", source: "AWS g4dn.xlarge (1× T4, 4 vCPU) on-demand, us-east-1" },
    ListPrice { name: "l4", usd_per_hour: 0.8048, per: "GPU-hour", source: "AWS g6.xlarge (1× L4, 4 vCPU) on-demand, us-east-1" },
    ListPrice { name: "a10g", usd_per_hour: 1.006, per: "GPU-hour", source: "AWS g5.xlarge (1× A10G, 4 vCPU) on-demand, us-east-1" },
    ListPrice {
        name: "a100", usd_per_hour: 4.0966, per: "GPU-hour", source: "AWS p4d.24xlarge (8× A100 40 GB) on-demand, us-east-1, ÷ 8"
    },
    ListPrice { name: "h100", usd_per_hour: 12.29, per: "GPU-hour", source: "AWS p5.48xlarge (8× H100 80 GB) on-demand, us-east-1, ÷ 8" },
    ListPrice { name: "cpu-4vcpu", usd_per_hour: 0.17, per: "machine-hour", source: "AWS c6i.xlarge (4 vCPU, 8 GiB) on-demand, us-east-1" },
    ListPrice {
        name: "cpu-16vcpu",
        usd_per_hour: 0.68,
        per: "machine-hour",
        source: "AWS c6i.4xlarge (16 vCPU, 32 GiB) on-demand, us-east-1",
    },
    ListPrice { name: "vcpu", usd_per_hour: 0.0425, per: "vCPU-hour", source: "AWS c6i.xlarge on-demand, us-east-1, ÷ 4 vCPU" },
];

/// What `auto` means on a GPU and on the CPU.
pub const AUTO_GPU: &str = "l4";
pub const AUTO_CPU: &str = "cpu-4vcpu";

/// An hourly price in force for a run, and where it comes from (an assumption either way).
#[derive(Clone, Debug, PartialEq)]
pub struct Price {
    pub usd_per_hour: f64,
    /// "l4 ($0.805 per GPU-hour: AWS g6.xlarge …, list price as of 2024-06)" or "$2 per hour (as set)".
    pub label: String,
}

/// The list prices in one line, for help text: "t4 $0.526, l4 $0.805, …".
fn names() -> String {
    LIST_PRICES.iter().map(|p| format!("{} ${}/{}", p.name, p.usd_per_hour, p.per)).collect::<Vec<_>>().join(", ")
}

impl Price {
    /// `text` is a number of US dollars per hour, or a list price's name; `auto` is
    /// `auto_name`'s list price (the caller picks it for the backend).
    pub fn parse(text: &str, auto_name: &str) -> Result<Price> {
        let t = text.trim();
        let t = if t.eq_ignore_ascii_case("auto") { auto_name } else { t };
        if let Some(p) = LIST_PRICES.iter().find(|p| p.name.eq_ignore_ascii_case(t)) {
            return Ok(Price {
                usd_per_hour: p.usd_per_hour,
                label: format!("{} (${} per {}: {}, list price as of {AS_OF})", p.name, p.usd_per_hour, p.per, p.source),
            });
        }
        match t.trim_start_matches('$').parse::<f64>() {
            Ok(v) if v.is_finite() && (0.0..=100_000.0).contains(&v) => {
                Ok(Price { usd_per_hour: v, label: format!("${v} per hour (as set)") })
            }
            _ => Err(Error::InvalidConfig(format!(
                "price {text:?}: give US dollars per hour (0 to 100000, e.g. 2.5) or a list price: auto, {}",
                LIST_PRICES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// The same price for `n` units (replicas, vCPUs): n × the hourly price.
    pub fn times(&self, n: f64, what: &str) -> Price {
        Price { usd_per_hour: self.usd_per_hour * n, label: format!("{n} {what} × {}", self.label) }
    }

    /// US dollars for `seconds` of it.
    pub fn usd(&self, seconds: f64) -> f64 {
        seconds / 3600.0 * self.usd_per_hour
    }

    /// The provenance of a cost computed from `time` (what was measured) and this price.
    pub fn provenance(&self, time: &str) -> Provenance {
        Provenance::Derived(format!("{time} × the assumed price {}", self.label))
    }
}

/// A price setting: `key` with `default` (a number, a list price's name, or auto) and help that
/// lists the list prices and says they are assumptions.
pub fn setting(s: Settings, key: &str, label: &str, what: &str, default: &str) -> Settings {
    s.add(
        key,
        label,
        &format!(
            "{what}: US dollars per hour (e.g. 2.5), or a list price — an assumption you can change, not a measurement (AWS on-demand, us-east-1, as of {AS_OF}): {}; auto: {AUTO_GPU} on a GPU, {AUTO_CPU} on the CPU",
            names()
        ),
        Value::Text(default.into()),
    )
}

/// The `price_per_hour` setting of a one-backend exercise (auto: a GPU's or the CPU's price).
pub fn price_setting(s: Settings) -> Settings {
    setting(
        s,
        "price_per_hour",
        "Price per hour (USD)",
        "What an hour of the backend costs (per GPU-hour, or per machine-hour for the CPU)",
        "auto",
    )
}

/// A price setting as set (its key names it in errors); read by each exercise's config.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceSetting {
    pub key: &'static str,
    pub text: String,
}

impl PriceSetting {
    /// The price asked for, with `auto` meaning the list price for `kind`.
    pub fn read(&self, kind: gpulab_core::tensor::BackendKind) -> Result<Price> {
        let auto = if kind == gpulab_core::tensor::BackendKind::Cpu { AUTO_CPU } else { AUTO_GPU };
        Price::parse(&self.text, auto).map_err(|e| Error::InvalidConfig(format!("{}: {e}", self.key)))
    }

    /// The price asked for on the backend `info`: `auto` on a software GPU (llvmpipe,
    /// SwiftShader) is the CPU's price, since it runs on the CPU, not a cloud GPU's.
    pub fn read_for(&self, info: &gpulab_core::tensor::BackendInfo) -> Result<Price> {
        let kind = if info.software { gpulab_core::tensor::BackendKind::Cpu } else { info.kind };
        self.read(kind)
    }

    /// Checks the price parses (for `Exercise::validate`).
    pub fn validate(&self) -> Result<()> {
        self.read(gpulab_core::tensor::BackendKind::Cpu).map(|_| ())
    }
}

/// The note every report with costs carries: the prices are assumptions.
pub fn note(prices: &[&Price]) -> String {
    let mut labels: Vec<&str> = prices.iter().map(|p| p.label.as_str()).collect();
    labels.dedup();
    format!(
        "Costs are measured time × an assumed hourly price, not measurements: {}. Set the price settings to your provider's prices (list prices differ by region, commitment and date; spot capacity costs less).",
        labels.join("; ")
    )
}

/// One training run's cost: its measured training time and the epochs it finished, at a price.
pub struct RunCost<'a> {
    pub name: String,
    pub price: &'a Price,
    pub train_s: f64,
    pub epochs: usize,
}

impl RunCost<'_> {
    /// US dollars per finished epoch; None before the first epoch finished.
    pub fn per_epoch(&self) -> Option<f64> {
        (self.epochs > 0).then(|| self.price.usd(self.train_s) / self.epochs as f64)
    }
    pub fn per_run(&self) -> f64 {
        self.price.usd(self.train_s)
    }
}

/// A table column of money per `item` and the factor its values are multiplied by: headed
/// "`what` per million epochs" (`format::money_per_unit`) where the smallest is a fraction of a
/// cent, so no cell is a row of zeros ("0.0000272"), at about three significant figures.
pub fn money_column(what: &str, item: &str, usd_each: &[f64], provenance: Provenance) -> (Column, f64) {
    let (per, k) = gpulab_core::format::money_per_unit(usd_each, item);
    let d = decimals(usd_each.iter().map(|v| v * k));
    (Column::num(&format!("{what} {per}"), "USD", d, provenance), k)
}

/// The "Cost" table of a training exercise: per run, the assumed price, the cost per epoch and
/// of the whole training run, derived from the measured training time.
pub fn training_table(runs: &[RunCost]) -> Table {
    let from = "measured training time × the assumed price beside it";
    let epochs: Vec<f64> = runs.iter().filter_map(|r| r.per_epoch()).collect();
    let whole: Vec<f64> = runs.iter().map(|r| r.per_run()).collect();
    let (per_epoch, ke) = money_column("cost", "epoch", &epochs, Provenance::derived(&format!("{from} ÷ epochs finished")));
    let (per_run, kr) = money_column("cost", "training run", &whole, Provenance::derived(from));
    Table {
        title: "Cost (measured time × assumed price)".into(),
        columns: vec![Column::text("run"), Column::text("assumed price"), per_epoch, per_run],
        rows: runs
            .iter()
            .map(|r| {
                vec![
                    Cell::from(r.name.clone()),
                    Cell::from(r.price.label.clone()),
                    r.per_epoch().map(|v| v * ke).into(),
                    (r.per_run() * kr).into(),
                ]
            })
            .collect(),
    }
}

/// Dollars as `format::money` prints them: "$0.0012", "$4.10".
pub fn usd_text(x: f64) -> String {
    gpulab_core::format::money(x)
}

/// Decimals a USD column needs to show `values` with about three significant figures.
pub fn decimals(values: impl IntoIterator<Item = f64>) -> usize {
    let least = values.into_iter().filter(|v| v.is_finite() && *v > 0.0).fold(f64::INFINITY, f64::min);
    if least.is_finite() { (2 - least.log10().floor() as i64).clamp(2, 12) as usize } else { 2 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_core::tensor::BackendKind;

    #[test]
    fn a_price_is_a_number_or_a_named_list_price_and_auto_follows_the_backend() {
        let p = Price::parse("a100", AUTO_GPU).unwrap();
        assert_eq!(p.usd_per_hour, 4.0966);
        assert!(p.label.contains("p4d.24xlarge") && p.label.contains(AS_OF), "{}", p.label);
        assert_eq!(Price::parse(" 2.5 ", AUTO_GPU).unwrap().usd_per_hour, 2.5);
        assert_eq!(Price::parse("$3", AUTO_GPU).unwrap().label, "$3 per hour (as set)");
        let s = price_setting(Settings::default());
        let price = crate::settings::shared::price(&s, "price_per_hour").unwrap();
        assert_eq!(price.read(BackendKind::Cpu).unwrap().usd_per_hour, 0.17);
        assert_eq!(price.read(BackendKind::Gpu).unwrap().usd_per_hour, 0.8048);
        for bad in ["", "free", "-1", "NaN", "1e9"] {
            let e = Price::parse(bad, AUTO_GPU).unwrap_err().to_string();
            assert!(e.contains("dollars per hour") && e.contains("h100"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn cost_is_time_times_price_and_counts_every_unit() {
        let p = Price::parse("3.6", AUTO_GPU).unwrap();
        assert!((p.usd(10.0) - 0.01).abs() < 1e-12);
        assert!((p.times(4.0, "replicas").usd(10.0) - 0.04).abs() < 1e-12);
        assert!(matches!(p.provenance("measured training time"), Provenance::Derived(f) if f.contains("assumed price $3.6")));
    }

    #[test]
    fn dollars_print_as_money() {
        assert_eq!(usd_text(4.0966), "$4.10");
        assert_eq!(usd_text(0.001234), "$0.0012");
        assert_eq!(usd_text(123.4), "$123.40");
        assert_eq!(decimals([0.001234, 5.0]), 5);
        assert_eq!(decimals([f64::NAN]), 2);
    }

    /// A cost per epoch of a fraction of a cent is shown per thousand or per million epochs,
    /// never as a row of zeros.
    #[test]
    fn small_costs_are_scaled_not_zeros() {
        let p = Price::parse("0.17", AUTO_CPU).unwrap();
        let t = training_table(&[RunCost { name: "cpu".into(), price: &p, train_s: 0.576, epochs: 1 }]);
        assert_eq!(t.columns[2].name, "cost per thousand epochs");
        assert_eq!(t.columns[3].name, "cost per thousand training runs");
        assert_eq!(t.rows[0][2].format(&t.columns[2]), "0.0272");
    }
}
