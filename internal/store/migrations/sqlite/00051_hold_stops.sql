-- Drills that stop themselves (issue 32): a hold's drill settings (its
-- stop conditions in force, those it added or dropped and why, its steps),
-- and the stop condition that released it, each as JSON ('' = none).
-- Kept with the hold: part of the audit log.

-- +goose Up
ALTER TABLE holds ADD COLUMN drill TEXT NOT NULL DEFAULT '';
ALTER TABLE holds ADD COLUMN breach TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE holds DROP COLUMN breach;
ALTER TABLE holds DROP COLUMN drill;
