from rootbound.cli import main

raise SystemExit(main())
