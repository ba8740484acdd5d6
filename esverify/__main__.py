"""`python -m esverify ARGS` runs the same command line as the `esverify` script."""
from esverify.cli import main

if __name__ == "__main__":
    main(prog_name="esverify")
