from drafter_service.server import main

raise SystemExit(main())
