from mpicluster.cli import main

main()
