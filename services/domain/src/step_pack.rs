//! A meter's step records of one closed UTC day packed into bytes, as a time-series database
//! keeps them: column by column (times, which values are present, counters, mean powers,
//! peaks), each value a zigzag varint of its difference from what the column predicts. A
//! meter reporting every minute has times as regular as a clock (a zero byte each), a
//! counter that rises by its step's mean power times its length (coded as the difference from
//! that: often a byte), mean power close to the step before, and peaks above the mean by
//! about what they were the step before. Every value comes back exactly:
//! differences are taken and undone with wrapping arithmetic, so any `i64` round-trips.
//!
//! The format's first byte is its version; [`unpack`] refuses what it does not know.

/// One step record as it is packed: the meter and day are the pack's, not the record's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedStep {
    /// Microseconds since the epoch, UTC: PostgreSQL's precision, whatever the step.
    pub ts_us: i64,
    pub counter_mj: Option<i64>,
    pub power_mw: Option<i64>,
    pub peak_mw: Option<i64>,
    pub counter_estimated: bool,
}

const VERSION: u8 = 1;

const HAS_COUNTER: u8 = 1;
const HAS_POWER: u8 = 2;
const HAS_PEAK: u8 = 4;
const ESTIMATED: u8 = 8;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("steps must be in strictly increasing time order (at {index})")]
    Order { index: usize },
    #[error("unknown pack version {0}")]
    Version(u8),
    #[error("pack ends early or carries bytes past its end")]
    Truncated,
}

/// Packs steps in strictly increasing time order.
pub fn pack(steps: &[PackedStep]) -> Result<Vec<u8>, PackError> {
    if let Some(i) = steps.windows(2).position(|w| w[0].ts_us >= w[1].ts_us) {
        return Err(PackError::Order { index: i + 1 });
    }
    // About ten bytes a step for a meter reporting every minute (the fleet bench's mix).
    let mut out = Vec::with_capacity(16 + steps.len() * 10);
    out.push(VERSION);
    put(&mut out, steps.len() as u64);
    let mut ts = SecondOrder::default();
    for s in steps {
        put_signed(&mut out, ts.next(s.ts_us));
    }
    out.extend(steps.iter().map(flags));
    // Powers before counters: a counter is predicted from its step's mean power.
    let mut power = 0i64;
    for p in steps.iter().filter_map(|s| s.power_mw) {
        put_signed(&mut out, p.wrapping_sub(power));
        power = p;
    }
    let mut counter = Counter::default();
    for s in steps {
        if let Some(c) = s.counter_mj {
            put_signed(&mut out, c.wrapping_sub(counter.predict(s)));
            counter.saw(s.ts_us, c);
        }
    }
    let mut peak = Peak::default();
    for s in steps {
        if let Some(p) = s.peak_mw {
            put_signed(&mut out, p.wrapping_sub(peak.predict(s)));
            peak.saw(s, p);
        }
    }
    Ok(out)
}

/// The steps a pack holds, in time order.
pub fn unpack(bytes: &[u8]) -> Result<Vec<PackedStep>, PackError> {
    let mut r = Reader { bytes, at: 0 };
    match r.byte()? {
        VERSION => {}
        v => return Err(PackError::Version(v)),
    }
    let n = usize::try_from(r.varint()?).map_err(|_| PackError::Truncated)?;
    // Each step takes at least two bytes (its time and its flags): a count past that is a
    // damaged pack, refused before it sizes an allocation.
    if n > bytes.len() / 2 {
        return Err(PackError::Truncated);
    }
    let mut ts = SecondOrder::default();
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        steps.push(PackedStep {
            ts_us: ts.undo(r.signed()?),
            counter_mj: None,
            power_mw: None,
            peak_mw: None,
            counter_estimated: false,
        });
    }
    let mut all_flags = Vec::with_capacity(n);
    for s in &mut steps {
        let f = r.byte()?;
        s.counter_estimated = f & ESTIMATED != 0;
        all_flags.push(f);
    }
    let mut power = 0i64;
    for (s, f) in steps.iter_mut().zip(&all_flags) {
        if f & HAS_POWER != 0 {
            power = power.wrapping_add(r.signed()?);
            s.power_mw = Some(power);
        }
    }
    let mut counter = Counter::default();
    for (s, f) in steps.iter_mut().zip(&all_flags) {
        if f & HAS_COUNTER != 0 {
            let c = counter.predict(s).wrapping_add(r.signed()?);
            s.counter_mj = Some(c);
            counter.saw(s.ts_us, c);
        }
    }
    let mut peak = Peak::default();
    for (s, f) in steps.iter_mut().zip(&all_flags) {
        if f & HAS_PEAK != 0 {
            let p = peak.predict(s).wrapping_add(r.signed()?);
            s.peak_mw = Some(p);
            peak.saw(s, p);
        }
    }
    if r.at != bytes.len() {
        return Err(PackError::Truncated);
    }
    Ok(steps)
}

fn flags(s: &PackedStep) -> u8 {
    let mut f = 0;
    if s.counter_mj.is_some() {
        f |= HAS_COUNTER;
    }
    if s.power_mw.is_some() {
        f |= HAS_POWER;
    }
    if s.peak_mw.is_some() {
        f |= HAS_PEAK;
    }
    if s.counter_estimated {
        f |= ESTIMATED;
    }
    f
}

/// A counter's prediction: the one before, risen by this step's mean power over the time
/// since (mW × µs / 10⁶ = mJ), or by the last rise where the step has no mean power.
#[derive(Default)]
struct Counter {
    last: Option<(i64, i64)>,
    rise: i64,
}

impl Counter {
    fn predict(&self, s: &PackedStep) -> i64 {
        match (self.last, s.power_mw) {
            (None, _) => 0,
            (Some((ts, c)), Some(p)) => {
                c.wrapping_add(p.wrapping_mul(s.ts_us.wrapping_sub(ts)) / 1_000_000)
            }
            (Some((_, c)), None) => c.wrapping_add(self.rise),
        }
    }

    fn saw(&mut self, ts_us: i64, c: i64) {
        if let Some((_, last)) = self.last {
            self.rise = c.wrapping_sub(last);
        }
        self.last = Some((ts_us, c));
    }
}

/// A peak's prediction: the step's mean (or the last peak, without one) plus the excess
/// over it that the last peak had.
#[derive(Default)]
struct Peak {
    last: i64,
    excess: i64,
}

impl Peak {
    fn base(&self, s: &PackedStep) -> i64 {
        s.power_mw.unwrap_or(self.last)
    }

    fn predict(&self, s: &PackedStep) -> i64 {
        self.base(s).wrapping_add(self.excess)
    }

    fn saw(&mut self, s: &PackedStep, peak: i64) {
        self.excess = peak.wrapping_sub(self.base(s));
        self.last = peak;
    }
}

/// A column coded as deltas of deltas: the first value as itself, the second as its
/// difference from the first, every later one as the change in that difference.
#[derive(Default)]
struct SecondOrder {
    seen: u8,
    last: i64,
    delta: i64,
}

impl SecondOrder {
    fn next(&mut self, v: i64) -> i64 {
        let delta = v.wrapping_sub(self.last);
        let coded = match self.seen {
            0 => v,
            1 => delta,
            _ => delta.wrapping_sub(self.delta),
        };
        self.seen = self.seen.saturating_add(1);
        self.delta = delta;
        self.last = v;
        coded
    }

    fn undo(&mut self, coded: i64) -> i64 {
        let v = match self.seen {
            0 => coded,
            1 => self.last.wrapping_add(coded),
            _ => self.last.wrapping_add(self.delta.wrapping_add(coded)),
        };
        self.seen = self.seen.saturating_add(1);
        self.delta = v.wrapping_sub(self.last);
        self.last = v;
        v
    }
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_signed(out: &mut Vec<u8>, v: i64) {
    put(out, ((v << 1) ^ (v >> 63)) as u64);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, PackError> {
        let b = *self.bytes.get(self.at).ok_or(PackError::Truncated)?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, PackError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(PackError::Truncated)
    }

    fn signed(&mut self) -> Result<i64, PackError> {
        let u = self.varint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn step(ts_us: i64, counter: i64, power: i64, peak: i64) -> PackedStep {
        PackedStep {
            ts_us,
            counter_mj: Some(counter),
            power_mw: Some(power),
            peak_mw: Some(peak),
            counter_estimated: false,
        }
    }

    #[test]
    fn a_day_of_a_steady_gpu_packs_to_a_few_bytes_a_step() {
        // 1,440 minutes at about 300 W with a little ripple, as a GPU under load reports: a
        // byte each for the time, the flags, the counter and the peak, two for the power.
        let mut counter = 5_000_000_000i64;
        let steps: Vec<PackedStep> = (0..1440)
            .map(|k| {
                let power = 300_000 + (k % 7) * 1_000;
                counter += power * 60;
                step(
                    1_788_220_800_000_000 + k * 60_000_000,
                    counter,
                    power,
                    power + 20_000,
                )
            })
            .collect();
        let packed = pack(&steps).unwrap();
        assert!(packed.len() < 1440 * 7, "{} bytes", packed.len());
        assert_eq!(unpack(&packed).unwrap(), steps);
    }

    #[test]
    fn absent_values_and_estimates_come_back_as_they_were() {
        let steps = [
            PackedStep {
                ts_us: 0,
                counter_mj: None,
                power_mw: Some(5),
                peak_mw: None,
                counter_estimated: false,
            },
            PackedStep {
                ts_us: 60_000,
                counter_mj: Some(7),
                power_mw: None,
                peak_mw: Some(9),
                counter_estimated: true,
            },
            step(61_000, 3, 0, 0),
        ];
        assert_eq!(unpack(&pack(&steps).unwrap()).unwrap(), steps);
        assert_eq!(unpack(&pack(&[]).unwrap()).unwrap(), []);
    }

    #[test]
    fn out_of_order_steps_and_damaged_packs_are_refused() {
        let s = step(60_000, 1, 1, 1);
        assert_eq!(pack(&[s, s]), Err(PackError::Order { index: 1 }));
        let packed = pack(&[s, step(120_000, 2, 2, 2)]).unwrap();
        assert_eq!(
            unpack(&packed[..packed.len() - 1]),
            Err(PackError::Truncated)
        );
        let mut longer = packed.clone();
        longer.push(0);
        assert_eq!(unpack(&longer), Err(PackError::Truncated));
        assert_eq!(unpack(&[2, 0]), Err(PackError::Version(2)));
        // A count no pack of this length could hold.
        assert_eq!(unpack(&[1, 0xff, 0xff, 0x03]), Err(PackError::Truncated));
    }

    fn any_steps() -> impl Strategy<Value = Vec<PackedStep>> {
        let value = prop_oneof![
            Just(None),
            any::<i64>().prop_map(Some),
            (0i64..2_000_000).prop_map(Some)
        ];
        proptest::collection::vec(
            (
                1i64..100_000,
                value.clone(),
                value.clone(),
                value,
                any::<bool>(),
            ),
            0..200,
        )
        .prop_flat_map(|gaps| {
            (any::<i64>()).prop_map(move |start| {
                let mut ts = start / 2;
                gaps.iter()
                    .map(|&(gap, counter_mj, power_mw, peak_mw, counter_estimated)| {
                        ts += gap;
                        PackedStep {
                            ts_us: ts,
                            counter_mj,
                            power_mw,
                            peak_mw,
                            counter_estimated,
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
    }

    proptest! {
        #[test]
        fn every_pack_unpacks_to_its_steps(steps in any_steps()) {
            prop_assert_eq!(unpack(&pack(&steps).unwrap()).unwrap(), steps);
        }

        #[test]
        fn no_bytes_make_unpack_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = unpack(&bytes);
        }
    }
}
