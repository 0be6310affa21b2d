-- An injection shift lies inside its interval, and a shift rests on at least one paper.
-- requires: injection_shifts
SELECT model, variant, measure, shift, ci_low, ci_high, n_papers FROM injection_shifts
WHERE (ci_low IS NOT NULL AND NOT isnan(ci_low) AND (shift < ci_low - 1e-9 OR shift > ci_high + 1e-9))
   OR (shift IS NOT NULL AND NOT isnan(shift) AND n_papers < 1);
