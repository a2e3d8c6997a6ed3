from verifier_service.server import main

raise SystemExit(main())
