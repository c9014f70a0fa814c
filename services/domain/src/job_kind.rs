//! What a job does: the one list of job kinds the ingest API accepts, admission treats
//! differently (each kind at its site's over-subscription factor) and chargeback bills as classes.
//! A job's priority is not one of these closed sets: see [`crate::priority`].

crate::names::names! {
    /// What a job does. The names are the API's, the database's (migration 0002's CHECK) and
    /// the statements' classes.
    pub enum JobKind {
        Training = "training",
        Inference = "inference",
        Batch = "batch",
        Interactive = "interactive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_back_from_its_name_and_serialises_as_it() {
        for k in JobKind::ALL {
            assert_eq!(JobKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
        assert_eq!(JobKind::parse("Training"), None);
        assert_eq!(JobKind::parse(""), None);
    }
}
