from gpucli.cli import main

main()
