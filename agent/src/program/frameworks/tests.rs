use super::*;
use crate::program::checkpoints::{complete, CheckpointWatch, Watcher};
use cohort_spec::progress::ProgressLine;

/// A checkpoint written by the real Lightning 2.6 (`ModelCheckpoint`,
/// `global_step` 300), as `torch.save` leaves it.
fn lightning_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lightning-2.6-step-300.ckpt")
}

fn hf(dir: &Path, step: i64, complete: bool) -> PathBuf {
    let at = dir.join(format!("checkpoint-{step}"));
    std::fs::create_dir_all(at.join("nested")).unwrap();
    std::fs::write(at.join("model.safetensors"), format!("weights {step}")).unwrap();
    std::fs::write(at.join("nested/part"), b"x").unwrap();
    if complete {
        std::fs::write(at.join(HF_STATE), format!("{{\"global_step\": {step}}}")).unwrap();
    }
    at
}

fn reported(lines: &[ProgressLine]) -> Vec<i64> {
    lines
        .iter()
        .map(|l| match l {
            ProgressLine::Checkpoint { step, .. } => *step,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_real_lightning_checkpoint_gives_its_global_step() {
    assert_eq!(lightning::global_step(&lightning_fixture()), Ok(300));
}

#[test]
fn originals_are_complete_framework_checkpoints_only() {
    let dir = tempfile::tempdir().unwrap();
    hf(dir.path(), 20, true);
    hf(dir.path(), 30, false);
    std::fs::copy(
        lightning_fixture(),
        dir.path().join("epoch=37-step=300.ckpt"),
    )
    .unwrap();
    std::fs::write(dir.path().join("half.ckpt"), b"PK\x03\x04").unwrap();
    std::fs::write(dir.path().join(".hidden.ckpt"), b"").unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("epoch=37-step=300.ckpt"),
        dir.path().join("last.ckpt"),
    )
    .unwrap();
    let found = originals(dir.path(), &mut Seen::default());
    let names: Vec<(&str, i64)> = found.iter().map(|o| (o.name.as_str(), o.step)).collect();
    assert_eq!(
        names,
        [("checkpoint-20", 20), ("epoch=37-step=300.ckpt", 300)]
    );
}

#[test]
fn adopted_checkpoints_are_recorded_resumed_from_and_kept_to_keep() {
    let dir = tempfile::tempdir().unwrap();
    let mut watcher = Watcher::new(CheckpointWatch {
        dir: dir.path().into(),
        keep: 2,
        remote: None,
    });
    hf(dir.path(), 10, true);
    hf(dir.path(), 20, false);
    assert_eq!(
        reported(&watcher.poll()),
        [10],
        "checkpoint-20 is not complete yet"
    );
    let adopted = dir.path().join("step-00000010");
    let copy = adopted.join("checkpoint-10");
    assert_eq!(std::fs::read(copy.join("nested/part")).unwrap(), b"x");
    let same = |a: &Path, b: &Path| {
        let ino = |p: &Path| p.metadata().unwrap().ino();
        ino(a) == ino(b)
    };
    assert!(
        same(
            &copy.join("model.safetensors"),
            &dir.path().join("checkpoint-10/model.safetensors")
        ),
        "linked, not copied"
    );
    assert_eq!(resume_paths(&adopted), (copy.clone(), copy.clone()));

    // The framework's own rotation removes its original: the copy stays.
    std::fs::remove_dir_all(dir.path().join("checkpoint-10")).unwrap();
    std::fs::write(dir.path().join("checkpoint-20").join(HF_STATE), b"{}").unwrap();
    hf(dir.path(), 30, true);
    assert_eq!(reported(&watcher.poll()), [20, 30]);
    assert!(watcher.poll().is_empty(), "each once");
    let steps: Vec<i64> = complete(dir.path()).iter().map(|(s, _)| *s).collect();
    assert_eq!(steps, [20, 30], "keep = 2");
    assert!(!dir.path().join("checkpoint-10").exists());

    // What keep drops takes the framework's original with it.
    hf(dir.path(), 40, true);
    assert_eq!(reported(&watcher.poll()), [40]);
    assert!(!dir.path().join("step-00000020").exists());
    assert!(
        !dir.path().join("checkpoint-20").exists(),
        "its original went with it"
    );
    assert!(dir.path().join("checkpoint-30").exists() && dir.path().join("checkpoint-40").exists());
}

#[test]
fn a_lightning_checkpoint_resumes_by_its_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        lightning_fixture(),
        dir.path().join("epoch=37-step=300.ckpt"),
    )
    .unwrap();
    // Lightning's `last.ckpt`: the same state, saved again.
    std::fs::copy(lightning_fixture(), dir.path().join("last.ckpt")).unwrap();
    assert_eq!(adopt(dir.path(), &mut Seen::default()), [300]);
    let adopted = dir.path().join("step-00000300");
    let file = adopted.join("epoch=37-step=300.ckpt");
    assert!(file.is_file());
    assert_eq!(resume_paths(&adopted), (adopted.clone(), file));
    // A program's own step directory resumes as itself.
    let own = dir.path().join("step-00000400");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("state.pt"), b"s").unwrap();
    assert_eq!(resume_paths(&own), (own.clone(), own.clone()));
}

#[test]
fn a_restart_discards_what_a_superseded_attempt_wrote_after_its_resume_step() {
    let dir = tempfile::tempdir().unwrap();
    for step in [10, 20, 30] {
        hf(dir.path(), step, true);
    }
    adopt(dir.path(), &mut Seen::default());
    let own = dir.path().join("step-00000040");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("state.pt"), b"s").unwrap();
    discard_after(dir.path(), Some(20));
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "checkpoint-10",
            "checkpoint-20",
            "step-00000010",
            "step-00000020",
            "step-00000040"
        ],
        "the program's own step-40 is its business"
    );
    discard_after(dir.path(), None);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn hf_names() {
    assert_eq!(hf_step("checkpoint-500"), Some(500));
    assert_eq!(hf_step("checkpoint-"), None);
    assert_eq!(hf_step("checkpoint-5x"), None);
    assert_eq!(hf_step("tmp-checkpoint-5"), None);
}
