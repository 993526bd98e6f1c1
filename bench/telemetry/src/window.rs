//! The measured window, in Unix epoch milliseconds (the coordinator stores
//! `sample_ms` the same way: the sample time floored to the millisecond).

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Window {
    pub fn contains(&self, ms: i64) -> bool {
        ms >= self.from_ms && ms < self.to_ms
    }
}

pub fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64) - 1,
    }
}

/// A protobuf timestamp as Unix epoch microseconds.
pub fn timestamp_micros(t: &prost_types::Timestamp) -> i64 {
    t.seconds * 1_000_000 + i64::from(t.nanos) / 1_000
}

pub fn unix_micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}
