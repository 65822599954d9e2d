"""`python -m orchestrator.backends.impairment plan PROFILE --target ...`: the playbooks' extra vars by hand."""

from orchestrator.backends.impairment import main

raise SystemExit(main())
