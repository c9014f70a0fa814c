//! Device models as collectors report them: the short generation name a model is grouped
//! under, and the share of its GPU that one partition (an NVIDIA MIG instance, an AMD
//! compute partition) holds.
//!
//! A device model's key is the name a collector reports for it (NVML's
//! `nvmlDeviceGetName`, e.g. 'NVIDIA H100 80GB HBM3'); other names for the same model (a part
//! number from the AMD exporter) are aliases of that key (migration 0034), resolved by the
//! store. What is here works on the key alone.

use crate::units::PPM;

/// The longest generation name returned, in characters: a table column, not a description.
pub const GENERATION_MAX_CHARS: usize = 32;

/// Words a model name starts with that name its vendor or brand, not its generation.
const VENDOR_WORDS: [&str; 7] = [
    "nvidia", "amd", "instinct", "radeon", "tesla", "geforce", "intel",
];

/// Family words that say nothing without the word after them ('RTX 6000', 'Quadro RTX').
const FAMILY_WORDS: [&str; 3] = ["rtx", "quadro", "gaudi"];

/// The short generation name of a device model, for grouping and display:
/// 'NVIDIA H100 80GB HBM3' → 'H100', 'NVIDIA A100-SXM4-80GB' → 'A100',
/// 'AMD Instinct MI300X' → 'MI300X', 'NVIDIA B200' → 'B200', 'NVIDIA RTX 6000 Ada
/// Generation' → 'RTX 6000', 'NVIDIA RTX PRO 6000 Blackwell Server Edition' → 'RTX PRO 6000'.
///
/// The vendor and brand words are dropped and the first remaining word is kept, cut at its
/// first '-' (NVML names SXM variants 'A100-SXM4-80GB'). A name with nothing left after that
/// comes back as itself, trimmed, with runs of white space made one space; whatever is
/// returned is at most [`GENERATION_MAX_CHARS`] characters, so a hostile name cannot widen a
/// table.
pub fn generation(model: &str) -> String {
    let words: Vec<&str> = model.split_whitespace().collect();
    let rest: Vec<&str> = words
        .iter()
        .copied()
        .skip_while(|w| VENDOR_WORDS.contains(&w.to_ascii_lowercase().as_str()))
        .collect();
    let name = match rest.as_slice() {
        [] => words.join(" "),
        // 'RTX PRO 6000 Blackwell': PRO is part of the family, the number names the model.
        [family, pro, next, ..]
            if family.eq_ignore_ascii_case("rtx") && pro.eq_ignore_ascii_case("pro") =>
        {
            format!("{family} {pro} {}", first_part(next))
        }
        [family, next, ..] if FAMILY_WORDS.contains(&family.to_ascii_lowercase().as_str()) => {
            format!("{family} {}", first_part(next))
        }
        [first, ..] => first_part(first).to_owned(),
    };
    name.chars().take(GENERATION_MAX_CHARS).collect()
}

/// A word up to its first '-', or the whole word where it starts with one.
fn first_part(word: &str) -> &str {
    match word.split('-').next() {
        Some(p) if !p.is_empty() => p,
        _ => word,
    }
}

/// The compute slices MIG divides most NVIDIA GPUs into (A100, H100, H200, B200: seven
/// GPCs); a profile `<g>g.<memory>gb` holds `g` of them.
pub const MIG_SLICES: u32 = 7;

/// The compute slices MIG divides a GPU of `model` into, by its generation: an A30 and an
/// RTX PRO 6000 Blackwell have four, an RTX PRO 5000 or 4500 two, the others (and a model
/// not known) seven. From NVIDIA's MIG user guide, "Supported GPUs".
pub fn mig_slices_of(model: Option<&str>) -> u32 {
    match model.map(|m| generation(m).to_ascii_uppercase()).as_deref() {
        Some("A30" | "RTX PRO 6000") => 4,
        Some("RTX PRO 5000" | "RTX PRO 4500") => 2,
        _ => MIG_SLICES,
    }
}

/// The share of its GPU, in millionths, that an allocation of a whole partition holds when
/// the scheduler gave none: an NVIDIA MIG profile `<g>g.<memory>gb` (`3g.40gb`, `1g.10gb+me`)
/// holds g of its GPU's slices (seven on an H100, four on an A30: [`mig_slices_of`] the GPU's
/// `model`); any other partition (an AMD compute partition in CPX, DPX or QPX mode, whose
/// profile names the mode, not a size) holds an equal part of its GPU, 1 / `partitions`, the
/// number of partitions its GPU has. Rounded down, so the partitions of one GPU never hold
/// more than it; never below one millionth.
pub fn partition_share_ppm(model: Option<&str>, profile: Option<&str>, partitions: u32) -> u32 {
    let gpu_slices = mig_slices_of(model);
    if let Some(slices) = profile.and_then(|p| mig_slices(p, gpu_slices)) {
        return (slices * PPM / gpu_slices).max(1);
    }
    (PPM / partitions.max(1)).max(1)
}

/// The compute slices of an NVIDIA MIG profile (`3g.40gb` → 3), if it is one a GPU of
/// `gpu_slices` can hold.
fn mig_slices(profile: &str, gpu_slices: u32) -> Option<u32> {
    let (g, memory) = profile.trim().split_once("g.")?;
    let slices: u32 = g.parse().ok()?;
    let memory_digits = memory.chars().take_while(char::is_ascii_digit).count();
    let is_mig = memory_digits > 0
        && memory[memory_digits..]
            .to_ascii_lowercase()
            .starts_with("gb");
    (is_mig && (1..=gpu_slices).contains(&slices)).then_some(slices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generations_of_the_models_collectors_report() {
        for (model, generation_name) in [
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 PCIe", "H100"),
            ("NVIDIA H200", "H200"),
            ("NVIDIA B200", "B200"),
            ("NVIDIA GH200 480GB", "GH200"),
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("Tesla V100-SXM2-16GB", "V100"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA RTX 6000 Ada Generation", "RTX 6000"),
            (
                "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "RTX PRO 6000",
            ),
            ("NVIDIA A30", "A30"),
            ("AMD Instinct MI300X", "MI300X"),
            ("AMD Instinct MI300X OAM", "MI300X"),
            ("AMD Radeon Instinct MI50", "MI50"),
            ("  AMD   Instinct  MI250X ", "MI250X"),
        ] {
            assert_eq!(generation(model), generation_name, "{model}");
        }
    }

    #[test]
    fn a_name_without_a_generation_falls_back_to_itself_trimmed() {
        assert_eq!(generation("  NVIDIA  "), "NVIDIA");
        assert_eq!(generation("AMD   Instinct"), "AMD Instinct");
        assert_eq!(generation(""), "");
        assert_eq!(generation("0x74a1"), "0x74a1");
        assert_eq!(generation("-"), "-");
    }

    #[test]
    fn a_long_name_is_bounded() {
        let long = "X".repeat(500);
        assert_eq!(generation(&long).chars().count(), GENERATION_MAX_CHARS);
        let wide = "Ü".repeat(100);
        assert_eq!(generation(&wide), "Ü".repeat(GENERATION_MAX_CHARS));
    }

    #[test]
    fn mig_profiles_hold_their_slices_and_amd_partitions_an_equal_part() {
        let h100 = Some("NVIDIA H100 80GB HBM3");
        assert_eq!(partition_share_ppm(h100, Some("3g.40gb"), 2), 428_571);
        assert_eq!(partition_share_ppm(h100, Some("4g.40gb"), 2), 571_428);
        assert_eq!(partition_share_ppm(h100, Some("1g.10gb+me"), 1), 142_857);
        assert_eq!(partition_share_ppm(h100, Some("7g.80gb"), 1), PPM);
        // A GPU whose model is not known is taken to have seven slices.
        assert_eq!(partition_share_ppm(None, Some("3g.40gb"), 2), 428_571);
        // An MI300X in CPX mode: eight partitions, an eighth each, whatever the profile says.
        let mi300x = Some("AMD Instinct MI300X");
        assert_eq!(partition_share_ppm(mi300x, Some("cpx"), 8), 125_000);
        assert_eq!(partition_share_ppm(mi300x, Some("dpx"), 2), 500_000);
        assert_eq!(partition_share_ppm(mi300x, None, 3), 333_333);
        // Not MIG profiles: counted as equal parts.
        assert_eq!(partition_share_ppm(h100, Some("8g.80gb"), 4), 250_000);
        assert_eq!(partition_share_ppm(h100, Some("3g."), 4), 250_000);
        assert_eq!(partition_share_ppm(h100, Some("3g.40"), 4), 250_000);
        // A partition whose GPU lists none (a partition count not known) is the whole GPU.
        assert_eq!(partition_share_ppm(None, None, 0), PPM);
    }

    #[test]
    fn an_a30_and_an_rtx_pro_have_fewer_slices() {
        // The A30's profiles: 1g.6gb is a quarter of it, 4g.24gb all of it.
        let a30 = Some("NVIDIA A30");
        assert_eq!(partition_share_ppm(a30, Some("1g.6gb"), 4), 250_000);
        assert_eq!(partition_share_ppm(a30, Some("2g.12gb+me"), 1), 500_000);
        assert_eq!(partition_share_ppm(a30, Some("4g.24gb"), 1), PPM);
        // A profile larger than the GPU has slices is not one of its MIG profiles.
        assert_eq!(partition_share_ppm(a30, Some("7g.80gb"), 2), 500_000);
        let rtx = "NVIDIA RTX PRO 6000 Blackwell Server Edition";
        assert_eq!(generation(rtx), "RTX PRO 6000");
        assert_eq!(partition_share_ppm(Some(rtx), Some("1g.24gb"), 4), 250_000);
        assert_eq!(mig_slices_of(Some("NVIDIA RTX PRO 5000 Blackwell")), 2);
        assert_eq!(mig_slices_of(Some("NVIDIA B200")), MIG_SLICES);
    }

    proptest! {
        #[test]
        fn partitions_never_hold_more_than_their_gpu(
            n in 1u32..10_000,
            profile in ".{0,12}",
            model in proptest::option::of(".{0,24}"),
        ) {
            let share = partition_share_ppm(model.as_deref(), Some(&profile), n);
            prop_assert!((1..=PPM).contains(&share));
            if mig_slices(&profile, mig_slices_of(model.as_deref())).is_none() {
                prop_assert!(u64::from(share) * u64::from(n) <= u64::from(PPM));
            }
        }

        #[test]
        fn generation_is_bounded_and_never_panics(model in "\\PC{0,80}") {
            prop_assert!(generation(&model).chars().count() <= GENERATION_MAX_CHARS);
        }
    }
}
