from orchestrator.server import main

raise SystemExit(main())
