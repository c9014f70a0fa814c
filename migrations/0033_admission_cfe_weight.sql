-- Admission's third signal (domain::admission::carbon_free): how much a tenant's policy
-- weighs the carbon-free share of a job's run against carbon and price together (0: not at
-- all, the behaviour before this migration; 1: the carbon-free share alone).
ALTER TABLE admission_policies
    ADD COLUMN cfe_weight numeric(4, 3) NOT NULL DEFAULT 0
        CHECK (cfe_weight >= 0 AND cfe_weight <= 1);
