//! The element types a shard may store, and converting rows between them on
//! the host (only when one data set mixes types: otherwise rows travel in
//! their stored type and are converted once per batch, on the device).

use tch::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Elem {
    F16,
    Bf16,
    F32,
    F64,
}

impl Elem {
    pub fn size(self) -> usize {
        match self {
            Elem::F16 | Elem::Bf16 => 2,
            Elem::F32 => 4,
            Elem::F64 => 8,
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Elem::F16 => Kind::Half,
            Elem::Bf16 => Kind::BFloat16,
            Elem::F32 => Kind::Float,
            Elem::F64 => Kind::Double,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
        }
    }

    /// The one type a batch of rows of `types` is formed in: their common
    /// type, or f32 when they differ (f64 when any is f64).
    pub fn common(types: impl IntoIterator<Item = Elem>) -> Option<Elem> {
        let mut it = types.into_iter();
        let first = it.next()?;
        Some(it.fold(first, |acc, t| match (acc, t) {
            (a, b) if a == b => a,
            (Elem::F64, _) | (_, Elem::F64) => Elem::F64,
            _ => Elem::F32,
        }))
    }
}

/// Convert little-endian values of `from` in `src` to `to` in `dst`
/// (`dst.len() / to.size() == src.len() / from.size()`).
pub fn convert(from: Elem, src: &[u8], to: Elem, dst: &mut [u8]) {
    if from == to {
        dst.copy_from_slice(src);
        return;
    }
    let values = src.chunks_exact(from.size()).map(|b| read(from, b));
    for (out, v) in dst.chunks_exact_mut(to.size()).zip(values) {
        write(to, v, out);
    }
}

fn read(e: Elem, b: &[u8]) -> f64 {
    match e {
        Elem::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
        Elem::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        Elem::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        Elem::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")),
    }
}

fn write(e: Elem, v: f64, out: &mut [u8]) {
    match e {
        Elem::F16 => out.copy_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        Elem::Bf16 => out.copy_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        Elem::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        Elem::F64 => out.copy_from_slice(&v.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_type_and_conversion() {
        assert_eq!(Elem::common([Elem::F16, Elem::F16]), Some(Elem::F16));
        assert_eq!(Elem::common([Elem::F16, Elem::Bf16]), Some(Elem::F32));
        assert_eq!(Elem::common([Elem::F32, Elem::F64]), Some(Elem::F64));
        assert_eq!(Elem::common([]), None);
        let src: Vec<u8> = [1.5f32, -2.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut half = vec![0u8; 4];
        convert(Elem::F32, &src, Elem::F16, &mut half);
        let mut back = vec![0u8; 8];
        convert(Elem::F16, &half, Elem::F32, &mut back);
        assert_eq!(back, src, "1.5 and -2.25 are exact in f16");
    }
}
