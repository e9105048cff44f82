"""The tool-use CPU demo (`make demo-tools`): a tiny model warm-started to call a calculator,
taught by RL to use it for multi-digit additions it cannot do in its head."""
