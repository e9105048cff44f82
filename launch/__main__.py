"""``mpirun -n N python -m launch CONFIG``: the canonical entry point (also under srun)."""

from launch.main import main

if __name__ == "__main__":
    main()
