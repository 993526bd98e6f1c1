//! TensorBoard's event file: TFRecord framing around `tensorflow.Event`
//! protos (only the fields scalars need), as TensorBoard's own loader
//! reads them. Each record is `u64 length`, the masked CRC-32C of those
//! eight bytes, the bytes, and their masked CRC-32C (little-endian).

use crc_fast::{checksum, CrcAlgorithm};
use prost::Message;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// `tensorflow.Event` (tensorflow/core/util/event.proto), the fields used.
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(string, optional, tag = "3")]
    file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    summary: Option<Summary>,
}

/// `tensorflow.Summary` (tensorflow/core/framework/summary.proto).
#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, optional, tag = "2")]
    simple_value: Option<f32>,
}

fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32;
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// An event file being written: `events.out.tfevents.<secs>.<host>.cohort`
/// in a directory (TensorBoard's run directory).
pub struct EventsFile {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventsFile {
    /// Creates the directory and the file, and writes the version record.
    pub fn create(dir: &Path, wall_time: f64) -> std::io::Result<EventsFile> {
        std::fs::create_dir_all(dir)?;
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
        let path = dir.join(format!(
            "events.out.tfevents.{}.{host}.cohort",
            wall_time as u64
        ));
        let mut file = EventsFile {
            out: BufWriter::new(File::create(&path)?),
            path,
        };
        file.record(&Event {
            wall_time,
            step: 0,
            file_version: Some("brain.Event:2".into()),
            summary: None,
        })?;
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One event of scalars at `step` (a NaN stays NaN, as TensorBoard shows it).
    pub fn scalars(
        &mut self,
        wall_time: f64,
        step: i64,
        values: &[(String, f64)],
    ) -> std::io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let value = values
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.clone(),
                simple_value: Some(*v as f32),
            })
            .collect();
        self.record(&Event {
            wall_time,
            step,
            file_version: None,
            summary: Some(Summary { value }),
        })
    }

    /// Makes what was written so far readable (a follower calls it per event).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn record(&mut self, event: &Event) -> std::io::Result<()> {
        let data = event.encode_to_vec();
        let length = (data.len() as u64).to_le_bytes();
        self.out.write_all(&length)?;
        self.out.write_all(&masked_crc(&length).to_le_bytes())?;
        self.out.write_all(&data)?;
        self.out.write_all(&masked_crc(&data).to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masked_crc_is_tensorflows() {
        // CRC-32C("123456789") is 0xE3069283 (its check value); masked as
        // TFRecord does, ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked
        // out from that formula: 0xc78ab0e5.
        assert_eq!(masked_crc(b"123456789"), 0xc78ab0e5);
    }

    #[test]
    fn records_are_framed_with_their_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = EventsFile::create(dir.path(), 1000.0).unwrap();
        file.scalars(1001.0, 7, &[("train/loss".into(), 0.5)])
            .unwrap();
        file.flush().unwrap();
        let bytes = std::fs::read(file.path()).unwrap();
        let mut at = 0;
        let mut events = Vec::new();
        while at < bytes.len() {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            let data = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(data));
            events.push(Event::decode(data).unwrap());
            at += 16 + len;
        }
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
        assert_eq!(events[1].step, 7);
        let value = &events[1].summary.as_ref().unwrap().value[0];
        assert_eq!(
            (value.tag.as_str(), value.simple_value),
            ("train/loss", Some(0.5))
        );
    }
}
