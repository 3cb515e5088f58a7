from gpuplane.cli import main

raise SystemExit(main())
