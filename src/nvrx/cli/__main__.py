from nvrx.cli import main

main()
