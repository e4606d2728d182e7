//! The same scenario served on several GPU types, side by side: each type's list price (an
//! assumption, `cost::LIST_PRICES`) and its speed relative to the scenario's worker curve (an
//! assumption: small-batch inference is memory-bound, so the curve scales with the datasheet
//! memory bandwidth), run through the one simulation. Every number is simulated; the verdict
//! names the cheapest type that met the SLO, and only when one did.

use super::report::{ServingNumbers, serving_numbers};
use super::simulated;
use crate::cost::{self, LIST_PRICES};
use gpulab_core::error::{Error, Result};
use gpulab_core::stop::Stop;
use gpulab_systems::platform::{self, Scenario};
use gpulab_systems::report::{Cell, Claims, Column, Part, Table};

/// Datasheet memory bandwidth, GB/s, of the GPU types with a list price.
const BANDWIDTH_GB_S: [(&str, f64); 5] = [("t4", 320.0), ("l4", 300.0), ("a10g", 600.0), ("a100", 1555.0), ("h100", 3350.0)];

/// The GPU type the scenario's worker speed curve is taken to be from.
pub const CURVE_GPU: &str = "a10g";

/// The default comparison.
pub const DEFAULT: &str = "t4,l4,a10g,a100,h100";

/// One GPU type as the comparison runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuOption {
    pub name: &'static str,
    pub on_demand_per_h: f64,
    /// Batches run this many times faster than the scenario's curve.
    pub speed: f64,
}

/// The GPU types `text` names ("t4,a100"; empty or "none": no comparison).
pub fn options(text: &str) -> Result<Vec<GpuOption>> {
    let t = text.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let reference = BANDWIDTH_GB_S.iter().find(|b| b.0 == CURVE_GPU).map_or(1.0, |b| b.1);
    let mut out: Vec<GpuOption> = Vec::new();
    for name in t.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let found = BANDWIDTH_GB_S.iter().find(|b| b.0.eq_ignore_ascii_case(name));
        let price = LIST_PRICES.iter().find(|p| p.name.eq_ignore_ascii_case(name));
        let (Some(&(n, bw)), Some(p)) = (found, price) else {
            return Err(Error::InvalidConfig(format!(
                "gpu_types: {name:?} is not a GPU type; known: {} (or none)",
                BANDWIDTH_GB_S.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
            )));
        };
        if !out.iter().any(|o| o.name == n) {
            out.push(GpuOption { name: n, on_demand_per_h: p.usd_per_hour, speed: bw / reference });
        }
    }
    Ok(out)
}

/// `sc` served on `g`: the curve's batch times divided by its speed, its list price on demand
/// and the scenario's spot discount.
pub fn scenario_on(sc: &Scenario, g: &GpuOption) -> Scenario {
    let mut s = sc.clone();
    let discount = if sc.pool.gpu.on_demand_per_h > 0.0 { sc.pool.gpu.spot_per_h / sc.pool.gpu.on_demand_per_h } else { 1.0 };
    s.pool.gpu.name = format!("{} (list price as of {})", g.name, cost::AS_OF);
    s.pool.gpu.on_demand_per_h = g.on_demand_per_h;
    s.pool.gpu.spot_per_h = g.on_demand_per_h * discount;
    for p in &mut s.pool.curve {
        p.seconds = (p.seconds / g.speed).max(1e-6);
    }
    s
}

/// One GPU type's simulated day.
#[derive(Clone, Debug)]
pub struct Compared {
    pub gpu: GpuOption,
    pub numbers: ServingNumbers,
    /// Dollars the scenario's serving cost on it.
    pub cost: f64,
    pub peak_workers: u32,
    pub p99_s: Option<f64>,
}

impl Compared {
    pub fn meets(&self, target: f64) -> bool {
        self.numbers.within_slo >= target
    }
}

/// Simulates `sc` on each of `gpus`, stopping between and within runs when `stop` says so.
pub fn compare(sc: &Scenario, gpus: &[GpuOption], stop: &Stop) -> Result<Vec<Compared>> {
    let mut out = Vec::new();
    for g in gpus {
        if stop.is_set() {
            break;
        }
        let s = scenario_on(sc, g);
        let r = platform::simulate(&s, stop, &mut |_| {})?;
        if r.stopped_early || stop.is_set() {
            break;
        }
        out.push(Compared {
            gpu: g.clone(),
            numbers: serving_numbers(&s, &r),
            cost: r.totals.cost,
            peak_workers: r.totals.max_alive,
            p99_s: r.p99_s,
        });
    }
    Ok(out)
}

pub fn table(sc: &Scenario, rows: &[Compared]) -> Table {
    let sim = simulated;
    Table {
        title: format!(
            "GPU types for the same scenario (simulated; list prices as of {} and speed ∝ memory bandwidth from the {CURVE_GPU}'s curve are assumptions)",
            cost::AS_OF
        ),
        columns: vec![
            Column::text("GPU type"),
            Column::num("assumed speed", "× the curve", 2, sim()),
            Column::num("list price", "$/GPU-hour", 3, sim()),
            Column::num("within the SLO", "%", 2, sim()),
            Column::num("p99 latency", "ms", 0, sim()),
            Column::num("peak workers", "", 0, sim()),
            Column::num("serving cost", "$", 2, sim()),
            Column::num("cost per 1,000 requests", "$", 4, sim()),
            Column::text("meets the SLO"),
        ],
        rows: rows
            .iter()
            .map(|c| {
                vec![
                    Cell::from(c.gpu.name),
                    c.gpu.speed.into(),
                    c.gpu.on_demand_per_h.into(),
                    (c.numbers.within_slo * 100.0).into(),
                    c.p99_s.map(|v| v * 1e3).into(),
                    (c.peak_workers as f64).into(),
                    c.cost.into(),
                    c.numbers.cost_per_1k.into(),
                    if c.meets(sc.slo_target) { "yes" } else { "no" }.into(),
                ]
            })
            .collect(),
    }
}

pub mod cond {
    pub const CHEAPEST_MEETING: &str = "this GPU type met the SLO, and no type that met it cost less";
    pub const NONE_MEETS: &str = "GPU types were compared, and none met the SLO";
}

/// The comparison's sentence: the cheapest type that met the SLO, or that none did.
pub fn claims(target: f64, rows: &[Compared]) -> Claims {
    let mut c = Claims::new();
    let meeting = rows.iter().filter(|r| r.meets(target));
    if let Some(best) = meeting.clone().min_by(|a, b| a.cost.total_cmp(&b.cost)) {
        let others = meeting.count() - 1;
        c.about(best.gpu.name).evidence(
            cond::CHEAPEST_MEETING,
            true,
            format!(
                "Of the GPU types compared (simulated, at assumed list prices), {} was the cheapest that met the SLO: ${:.2} for the scenario, ${:.4} per 1,000 requests, {:.2}% within it{}.",
                best.gpu.name,
                best.cost,
                best.numbers.cost_per_1k,
                best.numbers.within_slo * 100.0,
                if others > 0 { format!(" ({others} more met it at a higher cost)") } else { String::new() }
            ),
        );
        c.about("");
    }
    c.claim(
        Part::Evidence,
        cond::NONE_MEETS,
        !rows.is_empty() && rows.iter().all(|r| !r.meets(target)),
        format!(
            "None of the {} GPU types compared met the SLO in the simulation; more workers (max_workers) or a faster type would.",
            rows.len()
        ),
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn options_name_their_prices_and_speeds_and_refuse_unknown_types() {
        let o = options("h100, t4,h100").unwrap();
        assert_eq!(o.iter().map(|g| g.name).collect::<Vec<_>>(), ["h100", "t4"]);
        assert!((o[0].speed - 3350.0 / 600.0).abs() < 1e-12 && o[0].on_demand_per_h == 12.29);
        assert!(options("none").unwrap().is_empty() && options("").unwrap().is_empty());
        let e = options("t4,v100").unwrap_err().to_string();
        assert!(e.contains("v100") && e.contains("a100"), "{e}");
        let sc = Scenario::preset("steady-day").unwrap();
        let s = scenario_on(&sc, &o[0]);
        assert!((s.pool.curve[0].seconds * o[0].speed - sc.pool.curve[0].seconds).abs() < 1e-12);
        assert!((s.pool.gpu.spot_per_h / s.pool.gpu.on_demand_per_h - sc.pool.gpu.spot_per_h / sc.pool.gpu.on_demand_per_h).abs() < 1e-12);
    }

    fn row(i: usize, within: f64, cost: f64) -> Compared {
        let name = ["t4", "l4", "a10g", "a100", "h100"][i % 5];
        Compared {
            gpu: GpuOption { name, on_demand_per_h: 1.0, speed: 1.0 },
            numbers: ServingNumbers { within_slo: within, cost_per_1k: cost / 1000.0, cost_per_h: cost / 24.0, utilisation: 0.5 },
            cost,
            peak_workers: 3,
            p99_s: Some(0.1),
        }
    }

    proptest! {
        /// Some types meeting the SLO or none, at any costs: the type named is one that met
        /// it and no type that met it cost less.
        #[test]
        fn the_cheapest_named_met_the_slo_and_none_that_met_it_cost_less(
            cells in proptest::collection::vec((0.9f64..1.0, 0.0f64..100.0), 0..5),
            target in 0.9f64..1.0,
        ) {
            let rows: Vec<Compared> = cells.iter().enumerate().map(|(i, &(w, c))| row(i, w, c)).collect();
            let claims = claims(target, &rows);
            claims.audit(|c| Some(match c.condition {
                cond::CHEAPEST_MEETING => {
                    let me = rows.iter().find(|r| r.gpu.name == c.subject)?;
                    me.numbers.within_slo >= target && rows.iter().filter(|r| r.numbers.within_slo >= target).all(|r| r.cost >= me.cost)
                }
                cond::NONE_MEETS => !rows.is_empty() && rows.iter().all(|r| r.numbers.within_slo < target),
                _ => return None,
            })).map_err(TestCaseError::fail)?;
            prop_assert_eq!(claims.printed().next().is_some(), !rows.is_empty());
        }
    }
}
