//! Exercise 10's scenario file (`Scenario::parse`, what `--set scenario=FILE` reads): any bytes
//! give a valid scenario or an error, never a panic; an accepted scenario writes as JSON that
//! parses back to the same scenario.
#![no_main]

use gpulab_systems::platform::Scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(s) = Scenario::parse(bytes) else { return };
    let again = Scenario::parse(s.to_json().as_bytes()).expect("an accepted scenario's JSON parses");
    assert_eq!(again, s);
});
