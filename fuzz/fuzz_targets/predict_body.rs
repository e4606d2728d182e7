//! The inference server's `POST /v1/predict` body (`serve::parse::parse_predict_body`): any bytes
//! give samples or a refusal, never a panic. Accepted samples number 1..=max_inputs, each of
//! exactly `features` finite values. The first byte picks the model's width (1..=16).
#![no_main]

use gpulab_systems::serve::parse::parse_predict_body;
use libfuzzer_sys::fuzz_target;

const MAX_INPUTS: usize = 8;

fuzz_target!(|input: &[u8]| {
    let Some((&width, body)) = input.split_first() else { return };
    let features = (width % 16) as usize + 1;
    let Ok(samples) = parse_predict_body(body, features, MAX_INPUTS) else { return };
    assert!(samples.len() <= MAX_INPUTS, "{} samples accepted", samples.len());
    for s in &samples {
        assert_eq!(s.len(), features);
        assert!(s.iter().all(|v| v.is_finite()));
    }
});
