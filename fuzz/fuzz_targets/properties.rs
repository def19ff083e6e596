#![no_main]
//! The broker's server.properties parser and validation, as `strand` reads
//! them (the module is compiled here from the broker's source).

#[allow(dead_code)]
#[path = "../../broker/src/config.rs"]
mod config;
#[allow(dead_code)]
#[path = "../../broker/src/connection_quotas.rs"]
mod connection_quotas;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(pairs) = config::parse_properties("fuzz", data) {
        let _ = config::BrokerConfig::from_pairs(pairs);
    }
});
