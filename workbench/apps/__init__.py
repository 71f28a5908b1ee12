"""Entry points above every layer: the command line, paper reproduction, the demo, the
lesson files, progress bars and exports."""
