//! The simulated fleet: `HOSTSxGPUS` (`32x8`: 32 hosts of 8 GPUs of 80 GiB)
//! or a TOML file of hosts:
//!
//! ```toml
//! [[host]]
//! name = "h100"      # hosts are named h100-0, h100-1, ...
//! count = 16
//! gpus = 8
//! memory_gib = 80
//! ```

use cohort_coordinator::policy::FleetView;
use cohort_coordinator::selection::Candidate;
use serde::Deserialize;
use std::path::Path;

const GIB: u64 = 1 << 30;

/// A kind of host, `count` of them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostKind {
    pub name: String,
    #[serde(default = "one")]
    pub count: u32,
    pub gpus: u32,
    #[serde(default = "eighty")]
    pub memory_gib: u32,
}

fn one() -> u32 {
    1
}

fn eighty() -> u32 {
    80
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    pub host: Vec<HostKind>,
}

impl FleetSpec {
    /// `32x8`, or the path of a TOML file.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some((hosts, gpus)) = text.split_once('x') {
            if let (Ok(hosts), Ok(gpus)) = (hosts.parse::<u32>(), gpus.parse::<u32>()) {
                if hosts == 0 || gpus == 0 || hosts > 100_000 || gpus > 64 {
                    return Err(format!("{text}: 1 to 100000 hosts of 1 to 64 GPUs"));
                }
                return Ok(FleetSpec {
                    host: vec![HostKind {
                        name: "host".into(),
                        count: hosts,
                        gpus,
                        memory_gib: 80,
                    }],
                });
            }
        }
        let path = Path::new(text);
        let toml = std::fs::read_to_string(path)
            .map_err(|e| format!("{text}: neither HOSTSxGPUS nor a readable file ({e})"))?;
        let spec: FleetSpec = toml::from_str(&toml).map_err(|e| format!("{text}: {e}"))?;
        if spec.host.is_empty() || spec.host.iter().any(|h| h.count == 0 || h.gpus == 0) {
            return Err(format!(
                "{text}: every [[host]] has count >= 1 and gpus >= 1"
            ));
        }
        Ok(spec)
    }

    pub fn gpus(&self) -> u32 {
        self.host.iter().map(|h| h.count * h.gpus).sum()
    }

    /// Every GPU free and healthy.
    pub fn view(&self) -> FleetView {
        let mut candidates = Vec::with_capacity(self.gpus() as usize);
        let mut hosts = 0;
        for kind in &self.host {
            for h in 0..kind.count {
                hosts += 1;
                let agent = format!("{}-{h}", kind.name);
                for g in 0..kind.gpus {
                    candidates.push(Candidate {
                        uuid: format!("{agent}/gpu-{g}"),
                        index: g as i32,
                        agent_id: agent.clone(),
                        agent_name: agent.clone(),
                        host_name: agent.clone(),
                        memory_total_bytes: u64::from(kind.memory_gib) * GIB,
                        memory_free_bytes: u64::from(kind.memory_gib) * GIB,
                        online: true,
                        hold: None,
                        foreign: Vec::new(),
                        faults: Vec::new(),
                        cordoned: None,
                    });
                }
            }
        }
        FleetView::new(hosts, candidates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorthand_or_a_file() {
        let f = FleetSpec::parse("32x8").unwrap();
        assert_eq!(f.gpus(), 256);
        assert_eq!(f.view().candidates.len(), 256);
        assert!(FleetSpec::parse("0x8").is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.toml");
        std::fs::write(
            &path,
            "[[host]]\nname = \"h100\"\ncount = 2\ngpus = 8\n\n[[host]]\nname = \"a10\"\ngpus = 4\nmemory_gib = 24\n",
        )
        .unwrap();
        let f = FleetSpec::parse(path.to_str().unwrap()).unwrap();
        assert_eq!(f.gpus(), 20);
        assert_eq!(f.view().agents, 3);
        std::fs::write(&path, "[[host]]\nname = \"x\"\ngpus = 8\nspeed = 2\n").unwrap();
        assert!(FleetSpec::parse(path.to_str().unwrap())
            .unwrap_err()
            .contains("speed"));
    }
}
