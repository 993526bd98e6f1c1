use super::*;

fn shape(topk: Option<i64>, unit: bool) -> Shape {
    Shape {
        d_in: 8,
        d_sae: 32,
        topk,
        aux_k: 4,
        apply_b_dec_to_input: false,
        unit_decoder: unit,
    }
}

fn batch() -> Tensor {
    tch::manual_seed(7);
    Tensor::randn([16, 8], (Kind::Float, Device::Cpu))
}

#[test]
fn topk_keeps_at_most_k_latents_per_sample() {
    let sae = Sae::new(shape(Some(3), true), Device::Cpu, 1);
    let f = sae.forward(&batch(), Kind::Float, None);
    let per_sample = Vec::<i64>::try_from(f.z.gt(0.0).sum_dim_intlist(
        [1i64].as_slice(),
        false,
        Kind::Int64,
    ))
    .unwrap();
    assert!(per_sample.iter().all(|n| *n <= 3), "{per_sample:?}");
    assert!(per_sample.contains(&3), "{per_sample:?}");
    let relu = Sae::new(shape(None, true), Device::Cpu, 1);
    let dense = relu
        .forward(&batch(), Kind::Float, None)
        .z
        .gt(0.0)
        .sum(Kind::Int64)
        .int64_value(&[]);
    assert!(dense > 3 * 16, "relu codes are not capped: {dense}");
}

#[test]
fn the_unit_decoder_starts_unit_and_its_gradient_loses_the_parallel_part() {
    let sae = Sae::new(shape(None, true), Device::Cpu, 2);
    let norms = sae.params[W_DEC].norm_scalaropt_dim(2, [0i64].as_slice(), false);
    let off = (norms - 1.0).abs().max().double_value(&[]);
    assert!(off < 1e-6, "column norms off by {off}");
    let mut projected = Tensor::randn([8, 32], (Kind::Float, Device::Cpu));
    sae.project_decoder_grad(&mut projected);
    let along =
        (&projected * &sae.params[W_DEC]).sum_dim_intlist([0i64].as_slice(), false, Kind::Float);
    assert!(along.abs().max().double_value(&[]) < 1e-5);
    let free = Sae::new(shape(None, false), Device::Cpu, 2);
    let norms = free.params[W_DEC].norm_scalaropt_dim(2, [0i64].as_slice(), false);
    assert!(
        (norms - 1.0).abs().max().double_value(&[]) > 0.1,
        "none leaves nn.Linear's init"
    );
}

#[test]
fn low_precision_compute_gives_f32_gradients_of_f32_weights() {
    let sae = Sae::new(shape(None, true), Device::Cpu, 3);
    for kind in [Kind::BFloat16, Kind::Half] {
        let x = batch().to_kind(kind);
        let f = sae.forward(&x, kind, None);
        assert_eq!(f.z.kind(), kind);
        assert_eq!(f.mse.kind(), Kind::Float);
        let grads = Tensor::run_backward(&[&(f.mse + f.l1)], &sae.params, false, false);
        for (p, g) in sae.params.iter().zip(&grads) {
            assert_eq!((p.kind(), g.kind()), (Kind::Float, Kind::Float));
        }
    }
}

#[test]
fn the_aux_loss_reaches_only_dead_latents() {
    let sae = Sae::new(shape(Some(2), true), Device::Cpu, 4);
    let x = batch();
    let mut dead = vec![false; 32];
    dead[5] = true;
    dead[9] = true;
    let mask = Tensor::from_slice(&dead);
    let f = sae.forward(
        &x,
        Kind::Float,
        Some(DeadMask {
            mask: &mask,
            count: 2,
        }),
    );
    assert!(f.aux.double_value(&[]) > 0.0);
    let g = Tensor::run_backward(&[&f.aux], &[&sae.params[0]], false, false);
    let rows = Vec::<f64>::try_from(g[0].abs().sum_dim_intlist(
        [1i64].as_slice(),
        false,
        Kind::Double,
    ))
    .unwrap();
    for (latent, sum) in rows.iter().enumerate() {
        assert_eq!(*sum > 0.0, dead[latent], "latent {latent}: {sum}");
    }
    let none = sae.forward(&x, Kind::Float, None);
    assert_eq!(none.aux.double_value(&[]), 0.0);
}

#[test]
fn apply_b_dec_to_input_shifts_what_the_encoder_sees() {
    let mut sae = Sae::new(shape(None, true), Device::Cpu, 5);
    tch::no_grad(|| {
        let _ = sae.params[B_DEC].shallow_clone().fill_(0.5);
    });
    let x = batch();
    let plain = sae.forward(&x, Kind::Float, None).z;
    sae.shape.apply_b_dec_to_input = true;
    let shifted = sae.forward(&x, Kind::Float, None).z;
    let expected = (&x - 0.5)
        .linear(&sae.params[0], Some(&sae.params[1]))
        .relu();
    assert!((&shifted - expected).abs().max().double_value(&[]) < 1e-6);
    assert!(
        (plain - shifted).abs().max().double_value(&[]) > 1e-3,
        "the shift changes the codes"
    );
}
