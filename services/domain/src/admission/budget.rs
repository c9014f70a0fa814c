//! The budget rule of admission: would this job exceed a budget? A budget is given as its
//! limit and what is already used (metered, plus admitted jobs not yet metered); where the
//! budgets come from (and how they are kept current) is the caller's business.

use rust_decimal::Decimal;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "metric", rename_all = "snake_case")]
pub enum Metric {
    EnergyKwh,
    Cost { currency: String },
    CarbonKg,
}

impl Metric {
    pub fn unit(&self) -> &str {
        match self {
            Metric::EnergyKwh => "kWh",
            Metric::Cost { currency } => currency,
            Metric::CarbonKg => "kgCO2e",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub name: String,
    pub metric: Metric,
    pub limit: Decimal,
    pub used: Decimal,
    /// Hard: exceeding rejects. Soft: admits with a warning.
    pub hard: bool,
}

/// What the job would add, per metric; `None` where it cannot be estimated (no price or
/// intensity known, or a cost in another currency).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobAmounts {
    pub kwh: Decimal,
    pub cost: Option<(Decimal, String)>,
    pub carbon_kg: Option<Decimal>,
}

impl JobAmounts {
    /// What the job adds to a budget of `metric`; `None` where it cannot be estimated.
    pub fn of(&self, metric: &Metric) -> Option<Decimal> {
        match metric {
            Metric::EnergyKwh => Some(self.kwh),
            Metric::Cost { currency } => self
                .cost
                .as_ref()
                .filter(|(_, c)| c == currency)
                .map(|(v, _)| *v),
            Metric::CarbonKg => self.carbon_kg,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Remaining {
    pub budget: String,
    #[serde(flatten)]
    pub metric: Metric,
    pub limit: Decimal,
    /// Left after this job (negative: over).
    pub remaining: Decimal,
    pub hard: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The hard budget that rejects the job, with the reason.
    pub reject: Option<String>,
    /// Soft budgets exceeded, and budgets the job could not be checked against.
    pub warnings: Vec<String>,
    pub remaining: Vec<Remaining>,
}

/// Checks the job against every budget: a hard budget already spent or that the job would
/// exceed rejects; a soft one warns.
pub fn check(budgets: &[Budget], job: &JobAmounts) -> Verdict {
    let mut verdict = Verdict {
        reject: None,
        warnings: Vec::new(),
        remaining: Vec::new(),
    };
    for b in budgets {
        let unit = b.metric.unit();
        let add = job.of(&b.metric);
        let after = b.used + add.unwrap_or_default();
        verdict.remaining.push(Remaining {
            budget: b.name.clone(),
            metric: b.metric.clone(),
            limit: b.limit,
            remaining: b.limit - after,
            hard: b.hard,
        });
        let over = if b.used >= b.limit {
            Some(format!(
                "budget '{}' is spent: {} of {} {unit} used",
                b.name,
                b.used.round_dp(3).normalize(),
                b.limit.normalize()
            ))
        } else if after > b.limit {
            Some(format!(
                "budget '{}' would be exceeded: {} {unit} used + {} for this job > {} {unit}",
                b.name,
                b.used.round_dp(3).normalize(),
                add.unwrap_or_default().round_dp(3).normalize(),
                b.limit.normalize()
            ))
        } else {
            None
        };
        match (over, b.hard) {
            (Some(why), true) => {
                if verdict.reject.is_none() {
                    verdict.reject = Some(format!("{why} (hard cap)"));
                }
            }
            (Some(why), false) => verdict.warnings.push(format!("{why} (soft cap: admitted)")),
            (None, _) if add.is_none() => verdict.warnings.push(format!(
                "budget '{}' in {unit}: this job's {unit} cannot be estimated (no signal), checked against what is used only",
                b.name
            )),
            (None, _) => {}
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn budget(metric: Metric, limit: &str, used: &str, hard: bool) -> Budget {
        Budget {
            name: "gpu-month".into(),
            metric,
            limit: d(limit),
            used: d(used),
            hard,
        }
    }

    #[test]
    fn hard_cap_rejects_naming_the_budget_soft_cap_warns() {
        let job = JobAmounts {
            kwh: d("120"),
            cost: Some((d("30"), "EUR".into())),
            carbon_kg: Some(d("40")),
        };
        let v = check(&[budget(Metric::EnergyKwh, "1000", "900", true)], &job);
        let why = v.reject.unwrap();
        assert!(why.contains("'gpu-month' would be exceeded"), "{why}");
        assert_eq!(v.remaining[0].remaining, d("-20"));

        let v = check(&[budget(Metric::EnergyKwh, "1000", "900", false)], &job);
        assert!(v.reject.is_none());
        assert!(v.warnings[0].contains("soft cap"));

        let v = check(&[budget(Metric::EnergyKwh, "1000", "880", true)], &job);
        assert!(v.reject.is_none() && v.warnings.is_empty());
        assert_eq!(v.remaining[0].remaining, d("0"));
    }

    #[test]
    fn a_spent_budget_rejects_even_a_job_that_cannot_be_estimated() {
        let job = JobAmounts {
            kwh: d("1"),
            cost: None,
            carbon_kg: None,
        };
        let c = Metric::Cost {
            currency: "EUR".into(),
        };
        let v = check(&[budget(c.clone(), "100", "100", true)], &job);
        assert!(v.reject.unwrap().contains("is spent"));
        let v = check(&[budget(c, "100", "10", true)], &job);
        assert!(v.reject.is_none());
        assert!(v.warnings[0].contains("cannot be estimated"));
    }

    #[test]
    fn a_cost_in_another_currency_is_not_added() {
        let job = JobAmounts {
            kwh: d("1"),
            cost: Some((d("500"), "USD".into())),
            carbon_kg: None,
        };
        let v = check(
            &[budget(
                Metric::Cost {
                    currency: "EUR".into(),
                },
                "100",
                "10",
                true,
            )],
            &job,
        );
        assert!(v.reject.is_none());
        assert_eq!(v.remaining[0].remaining, d("90"));
    }
}
