"""A pipeline run's lifecycle: its record, lease and heartbeat, crashed-run detection, resume, the nothing-new skip,
the method tags its results carry, opening and closing it (a comparison's parent and child runs too), the steps
that need storage, tracking and judging together (the dataset, scoring, registration), and the journal of its
stages."""
