-- A scheduler's `Idempotency-Key` on `POST /v1/admission` (the IETF httpapi draft's header):
-- a question asked again with the same key by the same tenant (the asker crashed between the
-- answer and its record of it, say) is answered with the decision already taken, and reserves
-- nothing twice. One decision per tenant and key; questions without a key are not limited.
ALTER TABLE admission_decisions ADD COLUMN idempotency_key text
    CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255);
CREATE UNIQUE INDEX admission_decisions_idempotency ON admission_decisions (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
