//! Bad input, tried (issue 20, section 5): what a coordinator (or anyone
//! posing as one) sends an agent. StartRanks of any shape is checked without
//! a panic; a ReadFile of any path never returns bytes of a file that is not
//! one of this agent's checkpoint files (a secret beside the work dir, `..`,
//! links); a member set of any URLs never grows the dial list past its cap.

use super::files;
use super::targets::Targets;
use cohort_proto::v1;
use cohort_spec::checkpoint::MANIFEST_FILE;
use proptest::prelude::*;
use std::sync::OnceLock;

/// A work dir with one checkpoint file, and a secret outside it (with a
/// link to it from a step directory).
#[allow(clippy::disallowed_methods)]
fn host() -> &'static (tempfile::TempDir, String) {
    static HOST: OnceLock<(tempfile::TempDir, String)> = OnceLock::new();
    HOST.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let step = dir
            .path()
            .join("work/trainings/t1/run/checkpoints/step-00000010");
        std::fs::create_dir_all(&step).unwrap();
        std::fs::write(step.join(MANIFEST_FILE), b"{\"ok\":true}").unwrap();
        std::fs::write(dir.path().join("secret.key"), b"TOP-SECRET").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.key"), step.join("link.json")).unwrap();
        let root = dir.path().display().to_string();
        (dir, root)
    })
}

fn path_part() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_string()),
        Just(".".to_string()),
        Just("work".to_string()),
        Just("trainings".to_string()),
        Just("t1".to_string()),
        Just("run".to_string()),
        Just("checkpoints".to_string()),
        Just("step-00000010".to_string()),
        Just("best".to_string()),
        Just(MANIFEST_FILE.to_string()),
        Just("link.json".to_string()),
        Just("secret.key".to_string()),
        Just(String::new()),
        "[ -~]{0,6}",
    ]
}

proptest! {
    #[test]
    fn start_ranks_of_any_shape(
        id in "[ -~]{0,12}",
        attempt in any::<i32>(),
        world in any::<i32>(),
        port in any::<u32>(),
        ranks in prop::collection::vec((any::<i32>(), any::<i32>(), any::<i32>(), any::<i32>()), 0..5),
        run_dir in "[ -~]{0,12}",
        gpus in 0usize..4,
    ) {
        let cmd = v1::StartRanks {
            training_id: id,
            attempt,
            world_size: world,
            master_port: port,
            ranks: ranks
                .into_iter()
                .map(|(rank, local_rank, local_world_size, gpu_index)| v1::LocalRankAssignment {
                    rank,
                    local_rank,
                    local_world_size,
                    gpu_index,
                    gpu_uuid: String::new(),
                })
                .collect(),
            run_dir,
            ..Default::default()
        };
        let _ = super::convert::start_ranks(cmd, gpus);
    }

    #[test]
    fn read_file_serves_only_checkpoint_files(
        parts in prop::collection::vec(path_part(), 0..10),
        offset in any::<u64>(),
        length in any::<u32>(),
        list in any::<bool>(),
    ) {
        let (dir, root) = host();
        let path = format!("{root}/{}", parts.join("/"));
        let chunk = files::read(&dir.path().join("work"), &v1::ReadFile {
            request_id: 1,
            path: path.clone(),
            offset,
            length,
            log: None,
            list,
        });
        prop_assert!(!chunk.data.windows(10).any(|w| w == b"TOP-SECRET"), "{path}");
        prop_assert!(chunk.data.len() as u64 <= files::MAX_READ);
    }

    #[test]
    fn member_sets_of_any_urls(members in prop::collection::vec("(https?://)?[ -~]{0,30}", 0..80)) {
        let mut t = Targets::new("http://a:1");
        let _ = t.learn(&members);
        prop_assert!(t.learned().len() <= 32);
        prop_assert_eq!(t.pick(), "http://a:1");
    }
}
