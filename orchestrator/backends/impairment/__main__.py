"""`python -m orchestrator.backends.impairment plan PROFILE --target ...`: the playbooks' extra vars by hand."""

from orchestrator.backends.impairment.cli_plan import main

raise SystemExit(main())
